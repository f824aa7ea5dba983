// Relayout canonicalization: inverse pairs cancel, chains merge, relayouts of constants fold into
// packed constants; a pair that drops padded channels first is kept.
// RUN: xmge-opt %s -p canonicalize --print-weights | filecheck %s

// CHECK-LABEL: func.func @cancel
// CHECK-NEXT:    func.return %x : tensor<1x8x2x2xf32>
func.func @cancel(%x: tensor<1x8x2x2xf32>) -> tensor<1x8x2x2xf32> {
  %0 = layout.relayout %x : tensor<1x8x2x2xf32> -> tensor<1x1x2x2x8xf32, #layout.fmt<nchw88>>
  %1 = layout.relayout %0 : tensor<1x1x2x2x8xf32, #layout.fmt<nchw88>> -> tensor<1x8x2x2xf32>
  func.return %1 : tensor<1x8x2x2xf32>
}

// CHECK-LABEL: func.func @merge
// CHECK-NEXT:    %0 = layout.relayout %x : tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>> -> tensor<1x1x2x2x8xf32, #layout.fmt<nchw88>>
// CHECK-NEXT:    func.return %0
func.func @merge(%x: tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x2x2x8xf32, #layout.fmt<nchw88>> {
  %0 = layout.relayout %x : tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>> -> tensor<1x8x2x2xf32>
  %1 = layout.relayout %0 : tensor<1x8x2x2xf32> -> tensor<1x1x2x2x8xf32, #layout.fmt<nchw88>>
  func.return %1 : tensor<1x1x2x2x8xf32, #layout.fmt<nchw88>>
}

// The packed weight: w[k][c] = 4k + c is stored at [c][k] inside the 4x4 block.
// CHECK-LABEL: func.func @fold
// CHECK-NEXT:    %0 = mgb.const #mgb.weight<"{{[0-9a-f]+}}", "0x000000000000804000000041000040410000803f0000a0400000104100005041000000400000c0400000204100006041000040400000e0400000304100007041"> {name = "fc.weight"} : tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>>
// CHECK-NEXT:    func.return %0
func.func @fold() -> tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>> {
  %w = mgb.const #mgb.weight<"bedee9f310e5702b", "0x000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041"> {name = "fc.weight"} : tensor<4x4x1x1xf32>
  %0 = layout.relayout %w : tensor<4x4x1x1xf32> -> tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>>
  func.return %0 : tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>>
}

// NHWCD4 -> NCHW {channels = 3} drops the padded channel, so going back is not the identity.
// CHECK-LABEL: func.func @lossy_pair_stays
// CHECK-NEXT:    %0 = layout.relayout %x {channels = 3 : i64}
// CHECK-NEXT:    %1 = layout.relayout %0 {channels = 3 : i64}
// CHECK-NEXT:    func.return %1
func.func @lossy_pair_stays(%x: tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>) -> tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>> {
  %0 = layout.relayout %x {channels = 3 : i64} : tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>> -> tensor<1x3x2x2xf32>
  %1 = layout.relayout %0 {channels = 3 : i64} : tensor<1x3x2x2xf32> -> tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>
  func.return %1 : tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>
}

// The other way round it cancels: NCHW -> NHWCD4 {channels = 3} keeps every element.
// CHECK-LABEL: func.func @padding_pair_cancels
// CHECK-NEXT:    func.return %x
func.func @padding_pair_cancels(%x: tensor<1x3x2x2xf32>) -> tensor<1x3x2x2xf32> {
  %0 = layout.relayout %x {channels = 3 : i64} : tensor<1x3x2x2xf32> -> tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>
  %1 = layout.relayout %0 {channels = 3 : i64} : tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>> -> tensor<1x3x2x2xf32>
  func.return %1 : tensor<1x3x2x2xf32>
}
