// Layouts in tensor types and layout.relayout print and parse back, in custom and generic form.
// RUN: xmge-opt %s | xmge-opt | filecheck %s
// RUN: xmge-opt %s --print-op-generic | xmge-opt | filecheck %s

// CHECK-LABEL: func.func @relayouts
// CHECK-NEXT:    %0 = layout.relayout %x : tensor<1x8x2x3xf32> -> tensor<1x2x2x3x4xf32, #layout.fmt<nchw44>>
// CHECK-NEXT:    %1 = layout.relayout %0 : tensor<1x2x2x3x4xf32, #layout.fmt<nchw44>> -> tensor<1x8x2x3xf32>
// CHECK-NEXT:    %2 = layout.relayout %y {channels = 3 : i64, scope = "s"} : tensor<1x3x2x2xf32> -> tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>
// CHECK-NEXT:    %3 = layout.relayout %0 : tensor<1x2x2x3x4xf32, #layout.fmt<nchw44>> -> tensor<1x1x2x3x8xf32, #layout.fmt<nchw88>>
func.func @relayouts(%x: tensor<1x8x2x3xf32>, %y: tensor<1x3x2x2xf32>) -> (tensor<1x8x2x3xf32>, tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>, tensor<1x1x2x3x8xf32, #layout.fmt<nchw88>>) {
  %0 = layout.relayout %x : tensor<1x8x2x3xf32> -> tensor<1x2x2x3x4xf32, #layout.fmt<nchw44>>
  %1 = layout.relayout %0 : tensor<1x2x2x3x4xf32, #layout.fmt<nchw44>> -> tensor<1x8x2x3xf32>
  %2 = layout.relayout %y {channels = 3 : i64, scope = "s"} : tensor<1x3x2x2xf32> -> tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>
  %3 = layout.relayout %0 : tensor<1x2x2x3x4xf32, #layout.fmt<nchw44>> -> tensor<1x1x2x3x8xf32, #layout.fmt<nchw88>>
  func.return %1, %2, %3 : tensor<1x8x2x3xf32>, tensor<1x2x1x2x4xf32, #layout.fmt<nhwcd4>>, tensor<1x1x2x3x8xf32, #layout.fmt<nchw88>>
}

// CHECK-LABEL: func.func @blocked_ops
// CHECK-NEXT:    %w = mgb.const #mgb.weight<"bedee9f310e5702b"> : tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>>
// CHECK-NEXT:    %0 = mgb.conv_bias %x, %w, %x {format = #mgb<format nchw44>} : (tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>, tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>>, tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>
// CHECK-NEXT:    %1 = mgb.pooling average %0 {window = array<i64: 2, 2>, stride = array<i64: 2, 2>, format = #mgb<format nchw44>} : (tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x2x2x4xf32, #layout.fmt<nchw44>>
// CHECK-NEXT:    %2 = mgb.reduce max %1 {axis = 3 : i64} : (tensor<1x1x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x2x1x4xf32, #layout.fmt<nchw44>>
func.func @blocked_ops(%x: tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x2x1x4xf32, #layout.fmt<nchw44>> {
  %w = mgb.const #mgb.weight<"bedee9f310e5702b", "0x000000000000803f0000004000004040000080400000a0400000c0400000e0400000004100001041000020410000304100004041000050410000604100007041"> : tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>>
  %0 = mgb.conv_bias %x, %w, %x {format = #mgb<format nchw44>} : (tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>, tensor<1x1x1x1x4x4xf32, #layout.fmt<KCRSc4k4>>, tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>
  %1 = mgb.pooling average %0 {window = array<i64: 2, 2>, stride = array<i64: 2, 2>, format = #mgb<format nchw44>} : (tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x2x2x4xf32, #layout.fmt<nchw44>>
  %2 = mgb.reduce max %1 {axis = 3 : i64} : (tensor<1x1x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x1x2x1x4xf32, #layout.fmt<nchw44>>
  func.return %2 : tensor<1x1x2x1x4xf32, #layout.fmt<nchw44>>
}
