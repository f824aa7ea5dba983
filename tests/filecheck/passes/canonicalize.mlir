// mgb-canonicalize (and xDSL's canonicalize, through the ops' canonicalization trait).
// RUN: xmge-opt %s -p mgb-canonicalize | filecheck %s
// RUN: xmge-opt %s -p canonicalize | filecheck %s
// RUN: xmge-opt %s -p "mgb-canonicalize{dce=false}" | filecheck %s --check-prefix=NODCE

// CHECK-LABEL: func.func @identities
// CHECK-NEXT:    func.return %x, %x, %x, %x, %x : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
func.func @identities(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %0 = mgb.reshape %x : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %1 = mgb.typecvt %x : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %2 = mgb.dimshuffle %x {pattern = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %3 = mgb.broadcast %x : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %4 = mgb.axis_add_remove %x {methods = [#mgb<axis_method add_1>, #mgb<axis_method remove>], axes = array<i64: 0, 0>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  func.return %0, %1, %2, %3, %4 : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @reshape_chain
// CHECK-NEXT:    %0 = mgb.reshape %x {scope = "last"} : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:    func.return %0 : tensor<4x6xf32>
// Without dce the bypassed producers stay (dead) in place.
// NODCE-LABEL: func.func @reshape_chain
// NODCE-NEXT:    %0 = mgb.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
// NODCE-NEXT:    %1 = mgb.axis_add_remove %0
// NODCE-NEXT:    %2 = mgb.reshape %x {scope = "last"} : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
// NODCE-NEXT:    func.return %2 : tensor<4x6xf32>
func.func @reshape_chain(%x: tensor<2x3x4xf32>) -> tensor<4x6xf32> {
  %0 = mgb.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %1 = mgb.axis_add_remove %0 {methods = [#mgb<axis_method add_1>], axes = array<i64: 0>} : (tensor<24xf32>) -> tensor<1x24xf32>
  %2 = mgb.reshape %1 {scope = "last"} : (tensor<1x24xf32>) -> tensor<4x6xf32>
  func.return %2 : tensor<4x6xf32>
}

// A reshape chain that comes back to the input shape disappears entirely.
// CHECK-LABEL: func.func @reshape_back
// CHECK-NEXT:    func.return %x : tensor<2x3xf32>
func.func @reshape_back(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = mgb.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
  %1 = mgb.reshape %0 : (tensor<6xf32>) -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}

// Two dimshuffles compose into one; a new axis (-1) survives the merge.
// CHECK-LABEL: func.func @dimshuffles
// CHECK-NEXT:    %0 = mgb.dimshuffle %x {pattern = array<i64: 1, -1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x1x4x2xf32>
// CHECK-NEXT:    func.return %0 : tensor<3x1x4x2xf32>
func.func @dimshuffles(%x: tensor<2x3x4xf32>) -> tensor<3x1x4x2xf32> {
  %0 = mgb.dimshuffle %x {pattern = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = mgb.dimshuffle %0 {pattern = array<i64: 2, -1, 0, 1>} : (tensor<4x2x3xf32>) -> tensor<3x1x4x2xf32>
  func.return %1 : tensor<3x1x4x2xf32>
}

// Inverse transposes cancel.
// CHECK-LABEL: func.func @inverse_dimshuffles
// CHECK-NEXT:    func.return %x : tensor<2x3x4xf32>
func.func @inverse_dimshuffles(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = mgb.dimshuffle %x {pattern = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = mgb.dimshuffle %0 {pattern = array<i64: 1, 2, 0>} : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
  func.return %1 : tensor<2x3x4xf32>
}

// f16 -> f32 -> f16 is exact and goes; f32 -> f16 -> f32 rounds and stays.
// CHECK-LABEL: func.func @typecvt_round_trips
// CHECK-NEXT:    %0 = mgb.typecvt %y : (tensor<4xf32>) -> tensor<4xf16>
// CHECK-NEXT:    %1 = mgb.typecvt %0 : (tensor<4xf16>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %x, %1 : tensor<4xf16>, tensor<4xf32>
func.func @typecvt_round_trips(%x: tensor<4xf16>, %y: tensor<4xf32>) -> (tensor<4xf16>, tensor<4xf32>) {
  %0 = mgb.typecvt %x : (tensor<4xf16>) -> tensor<4xf32>
  %1 = mgb.typecvt %0 : (tensor<4xf32>) -> tensor<4xf16>
  %2 = mgb.typecvt %y : (tensor<4xf32>) -> tensor<4xf16>
  %3 = mgb.typecvt %2 : (tensor<4xf16>) -> tensor<4xf32>
  func.return %1, %3 : tensor<4xf16>, tensor<4xf32>
}

// Ops that change something are left alone.
// CHECK-LABEL: func.func @untouched
// CHECK-NEXT:    %0 = mgb.reshape %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK-NEXT:    %1 = mgb.dimshuffle %0 {pattern = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:    %2 = mgb.broadcast %1 : (tensor<2x3xf32>) -> tensor<4x2x3xf32>
// CHECK-NEXT:    func.return %2
func.func @untouched(%x: tensor<2x3xf32>) -> tensor<4x2x3xf32> {
  %0 = mgb.reshape %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = mgb.dimshuffle %0 {pattern = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %2 = mgb.broadcast %1 : (tensor<2x3xf32>) -> tensor<4x2x3xf32>
  func.return %2 : tensor<4x2x3xf32>
}
