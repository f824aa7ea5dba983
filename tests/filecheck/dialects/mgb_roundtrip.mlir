// Every mgb op, quantized types and weights: custom syntax and the generic form both round-trip.
// RUN: xmge-opt %s | xmge-opt | filecheck %s
// RUN: xmge-opt %s --print-op-generic | xmge-opt | filecheck %s
// RUN: xmge-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @indexing(%x: tensor<4x5x6xf32>, %v: tensor<4x2xf32>, %i: tensor<3xi32>, %j: tensor<3xi32>, %w: tensor<3x5xf32>, %s: tensor<1xf32>) -> (tensor<4x5x6xf32>, tensor<4x5x6xf32>, tensor<3x5xf32>, tensor<4x5x6xf32>, tensor<4x5x6xf32>, tensor<7xf32>) {
  %0 = mgb.set_subtensor %x, %v {axes = array<i64: 1, 2>, starts = array<i64: 0, 3>, stops = array<i64: 2, 4>, steps = array<i64: 1, 1>, drop = array<i64: 0, 1>} : (tensor<4x5x6xf32>, tensor<4x2xf32>) -> tensor<4x5x6xf32>
  %1 = mgb.incr_subtensor %x, %v {axes = array<i64: 1, 2>, starts = array<i64: 0, 3>, stops = array<i64: 2, 4>, steps = array<i64: 1, 1>, drop = array<i64: 0, 1>} : (tensor<4x5x6xf32>, tensor<4x2xf32>) -> tensor<4x5x6xf32>
  %2 = mgb.indexing_multi_axis_vec %x, %i, %j {axes = array<i64: 0, 2>} : (tensor<4x5x6xf32>, tensor<3xi32>, tensor<3xi32>) -> tensor<3x5xf32>
  %3 = mgb.indexing_set_multi_axis_vec %x, %w, %i, %j {axes = array<i64: 0, 2>} : (tensor<4x5x6xf32>, tensor<3x5xf32>, tensor<3xi32>, tensor<3xi32>) -> tensor<4x5x6xf32>
  %4 = mgb.indexing_incr_multi_axis_vec %x, %w, %i, %j {axes = array<i64: 0, 2>} : (tensor<4x5x6xf32>, tensor<3x5xf32>, tensor<3xi32>, tensor<3xi32>) -> tensor<4x5x6xf32>
  %5 = mgb.linspace %s, %s {num = 7 : i64, endpoint = false} : (tensor<1xf32>, tensor<1xf32>) -> tensor<7xf32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<4x5x6xf32>, tensor<4x5x6xf32>, tensor<3x5xf32>, tensor<4x5x6xf32>, tensor<4x5x6xf32>, tensor<7xf32>
}

func.func @conv(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>, %b: tensor<1x6x1x1xf32>, %z: tensor<2x6x4x4xf32>, %gw: tensor<2x3x2x3x3xf32>) -> (tensor<2x6x8x8xf32>, tensor<2x6x4x4xf32>, tensor<2x6x4x4xf32>, tensor<2x6x6x6xf32>) {
  %0 = mgb.convolution %x, %w {padding = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<2x6x8x8xf32>
  %1 = mgb.conv_bias %x, %w, %b {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, nonline_mode = #mgb<nonline relu>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<1x6x1x1xf32>) -> tensor<2x6x4x4xf32>
  %2 = mgb.conv_bias %x, %w, %b, %z {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<1x6x1x1xf32>, tensor<2x6x4x4xf32>) -> tensor<2x6x4x4xf32>
  %3 = mgb.convolution %x, %gw {sparse = #mgb<sparse group>, mode = #mgb<conv_mode convolution>} : (tensor<2x4x8x8xf32>, tensor<2x3x2x3x3xf32>) -> tensor<2x6x6x6xf32>
  func.return %0, %1, %2, %3 : tensor<2x6x8x8xf32>, tensor<2x6x4x4xf32>, tensor<2x6x4x4xf32>, tensor<2x6x6x6xf32>
}

func.func @elemwise_pool(%x: tensor<2x4x8x8xf32>, %c: tensor<1x4x1x1xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xi1>, tensor<2x4x4x4xf32>, tensor<2x4x1x1xf32>) {
  %0 = mgb.elemwise fuse_add_relu %x, %c : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>) -> tensor<2x4x8x8xf32>
  %1 = mgb.elemwise lt %0, %x : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %2 = mgb.elemwise fuse_mul_add3 %0, %c, %x {scope = "block.0"} : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %3 = mgb.pooling average %2 {window = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x4x4xf32>
  %4 = mgb.adaptive_pooling max %2 {out_shape = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x1x1xf32>
  func.return %0, %1, %3, %4 : tensor<2x4x8x8xf32>, tensor<2x4x8x8xi1>, tensor<2x4x4x4xf32>, tensor<2x4x1x1xf32>
}

func.func @matmul(%a: tensor<3x5xf32>, %b: tensor<7x5xf32>, %ba: tensor<2x5x3xf16>, %bb: tensor<2x5x7xf16>) -> (tensor<3x7xf32>, tensor<2x3x7xf16>) {
  %0 = mgb.matrix_mul %a, %b {transpose_b = true, compute_mode = #mgb<compute_mode float32>} : (tensor<3x5xf32>, tensor<7x5xf32>) -> tensor<3x7xf32>
  %1 = mgb.batched_matrix_mul %ba, %bb {transpose_a = true} : (tensor<2x5x3xf16>, tensor<2x5x7xf16>) -> tensor<2x3x7xf16>
  func.return %0, %1 : tensor<3x7xf32>, tensor<2x3x7xf16>
}

func.func @shapes(%x: tensor<2x4x6xf32>, %y: tensor<2x1x6xf32>) -> (tensor<8x6xf32>, tensor<2x4x6xf32>, tensor<6x1x2x4xf32>, tensor<2x6xf32>, tensor<2x5x6xf32>, tensor<2x1x6xf32>, tensor<2x3x6xf32>, tensor<2x2x3xf32>) {
  %0 = mgb.reshape %x : (tensor<2x4x6xf32>) -> tensor<8x6xf32>
  %1 = mgb.broadcast %y : (tensor<2x1x6xf32>) -> tensor<2x4x6xf32>
  %2 = mgb.dimshuffle %x {pattern = array<i64: 2, -1, 0, 1>} : (tensor<2x4x6xf32>) -> tensor<6x1x2x4xf32>
  %3 = mgb.axis_add_remove %y {methods = [#mgb<axis_method remove>], axes = array<i64: 1>} : (tensor<2x1x6xf32>) -> tensor<2x6xf32>
  %4 = mgb.concat %x, %y {axis = 1 : i64} : (tensor<2x4x6xf32>, tensor<2x1x6xf32>) -> tensor<2x5x6xf32>
  %5, %6 = mgb.split %4 {axis = 1 : i64, sizes = array<i64: 1, 4>} : (tensor<2x5x6xf32>) -> (tensor<2x1x6xf32>, tensor<2x4x6xf32>)
  %7 = mgb.subtensor %6 {axes = array<i64: 1, 2>, starts = array<i64: 0, 0>, stops = array<i64: 3, 6>, steps = array<i64: 1, 1>, drop = array<i64: 0, 0>} : (tensor<2x4x6xf32>) -> tensor<2x3x6xf32>
  %8 = mgb.subtensor %x {axes = array<i64: 1, 2>, starts = array<i64: -1, 1>, stops = array<i64: 4, 6>, steps = array<i64: 1, 2>, drop = array<i64: 1, 0>} : (tensor<2x4x6xf32>) -> tensor<2x3xf32>
  %9 = mgb.reshape %8 : (tensor<2x3xf32>) -> tensor<2x1x3xf32>
  %10 = mgb.padding %9 {front = array<i64: 0, 1, 0>, back = array<i64: 0, 0, 0>, value = 5.000000e-01 : f64, mode = #mgb<padding_mode constant>} : (tensor<2x1x3xf32>) -> tensor<2x2x3xf32>
  func.return %0, %1, %2, %3, %4, %5, %7, %10 : tensor<8x6xf32>, tensor<2x4x6xf32>, tensor<6x1x2x4xf32>, tensor<2x6xf32>, tensor<2x5x6xf32>, tensor<2x1x6xf32>, tensor<2x3x6xf32>, tensor<2x2x3xf32>
}

func.func @misc(%x: tensor<2x4x8x8xf32>, %p: tensor<1x4x1x1xf32>) -> (tensor<2x1x8x8xf32>, tensor<2x4x8x8xf16>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) {
  %0 = mgb.reduce sum_sqr %x {axis = 1 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x1x8x8xf32>
  %1 = mgb.typecvt %x : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf16>
  %2 = mgb.softmax %x {axis = 1 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %3 = mgb.batch_norm %x, %p, %p, %p, %p {epsilon = 1.000000e-03 : f64} : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) -> tensor<2x4x8x8xf32>
  func.return %0, %1, %2, %3 : tensor<2x1x8x8xf32>, tensor<2x4x8x8xf16>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
}

func.func @quant(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3x!mgb.quant<qint8, 0.05>>, %b: tensor<1x8x1x1x!mgb.quant<qint32, 0.005>>) -> tensor<1x8x6x6x!mgb.quant<quint8, 0.25, 128>> {
  %0 = mgb.typecvt %x : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8x!mgb.quant<qint8, 0.1>>
  %1 = mgb.conv_bias %0, %w, %b : (tensor<1x4x8x8x!mgb.quant<qint8, 0.1>>, tensor<8x4x3x3x!mgb.quant<qint8, 0.05>>, tensor<1x8x1x1x!mgb.quant<qint32, 0.005>>) -> tensor<1x8x6x6x!mgb.quant<quint8, 0.25, 128>>
  func.return %1 : tensor<1x8x6x6x!mgb.quant<quint8, 0.25, 128>>
}

func.func @quant_multi_type(%a: tensor<1x8x6x6x!mgb.quant<qint8, 0.1>>, %b: tensor<1x8x1x1x!mgb.quant<qint8, 0.2>>) -> (tensor<1x8x6x6x!mgb.quant<qint8, 0.3>>, tensor<1x8x6x6xi1>) {
  %0 = mgb.elemwise_multi_type qfuse_add_relu %a, %b : (tensor<1x8x6x6x!mgb.quant<qint8, 0.1>>, tensor<1x8x1x1x!mgb.quant<qint8, 0.2>>) -> tensor<1x8x6x6x!mgb.quant<qint8, 0.3>>
  %1 = mgb.elemwise_multi_type lt %a, %b : (tensor<1x8x6x6x!mgb.quant<qint8, 0.1>>, tensor<1x8x1x1x!mgb.quant<qint8, 0.2>>) -> tensor<1x8x6x6xi1>
  func.return %0, %1 : tensor<1x8x6x6x!mgb.quant<qint8, 0.3>>, tensor<1x8x6x6xi1>
}

func.func @vision(%x: tensor<2x4x5x7xf32>, %w: tensor<4x3x3x2xf32>, %gw: tensor<2x2x3x3x3xf32>, %lw: tensor<5x7xf32>) -> (tensor<2x3x10x9xf32>, tensor<2x6x9x13xf32>, tensor<2x4x9x3xf32>, tensor<2x4x10x14xf32>, tensor<2x4x5x7xf32>, tensor<2x4x5x7xf32>, tensor<2x1x5x7xi32>, tensor<2x4x5x1xi32>) {
  %0 = mgb.convolution_backward_data %w, %x {stride = array<i64: 2, 1>, padding = array<i64: 1, 0>, dilation = array<i64: 1, 2>, output_padding = array<i64: 1, 0>} : (tensor<4x3x3x2xf32>, tensor<2x4x5x7xf32>) -> tensor<2x3x10x9xf32>
  %1 = mgb.convolution_backward_data %gw, %x {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, sparse = #mgb<sparse group>} : (tensor<2x2x3x3x3xf32>, tensor<2x4x5x7xf32>) -> tensor<2x6x9x13xf32>
  %2 = mgb.resize %x {out_shape = array<i64: 9, 3>} : (tensor<2x4x5x7xf32>) -> tensor<2x4x9x3xf32>
  %3 = mgb.resize %x {out_shape = array<i64: 10, 14>, imode = #mgb<interp nearest>} : (tensor<2x4x5x7xf32>) -> tensor<2x4x10x14xf32>
  %4, %5, %6 = mgb.layer_norm %x, %lw, %lw {eps = 1.000000e-03 : f64, normalized_dim = 2 : i64, normalized_size = 35 : i64} : (tensor<2x4x5x7xf32>, tensor<5x7xf32>, tensor<5x7xf32>) -> (tensor<2x4x5x7xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
  %7, %8, %9 = mgb.layer_norm %x {affine = false, normalized_size = 7 : i64} : (tensor<2x4x5x7xf32>) -> (tensor<2x4x5x7xf32>, tensor<2x4x5xf32>, tensor<2x4x5xf32>)
  %10 = mgb.argmax %x {axis = 1 : i64} : (tensor<2x4x5x7xf32>) -> tensor<2x1x5x7xi32>
  %11 = mgb.argmin %x {axis = 3 : i64} : (tensor<2x4x5x7xf32>) -> tensor<2x4x5x1xi32>
  func.return %0, %1, %2, %3, %4, %7, %10, %11 : tensor<2x3x10x9xf32>, tensor<2x6x9x13xf32>, tensor<2x4x9x3xf32>, tensor<2x4x10x14xf32>, tensor<2x4x5x7xf32>, tensor<2x4x5x7xf32>, tensor<2x1x5x7xi32>, tensor<2x4x5x1xi32>
}

func.func @consts() -> (tensor<2x3xf32>, tensor<4xi8>) {
  %w = mgb.const #mgb.weight<"1a2b3c4d5e6f7081"> {name = "fc.weight"} : tensor<2x3xf32>
  %q = mgb.const #mgb.weight<"0011223344556677"> : tensor<4xi8>
  func.return %w, %q : tensor<2x3xf32>, tensor<4xi8>
}

// The printed form, line by line (custom syntax; defaults are not printed).
// CHECK-LABEL: func.func @indexing(
// CHECK-NEXT:  %0 = mgb.set_subtensor %x, %v {axes = array<i64: 1, 2>, starts = array<i64: 0, 3>, stops = array<i64: 2, 4>, steps = array<i64: 1, 1>, drop = array<i64: 0, 1>} : (tensor<4x5x6xf32>, tensor<4x2xf32>) -> tensor<4x5x6xf32>
// CHECK-NEXT:  %1 = mgb.incr_subtensor %x, %v {{.*}} : (tensor<4x5x6xf32>, tensor<4x2xf32>) -> tensor<4x5x6xf32>
// CHECK-NEXT:  %2 = mgb.indexing_multi_axis_vec %x, %i, %j {axes = array<i64: 0, 2>} : (tensor<4x5x6xf32>, tensor<3xi32>, tensor<3xi32>) -> tensor<3x5xf32>
// CHECK-NEXT:  %3 = mgb.indexing_set_multi_axis_vec %x, %w, %i, %j {axes = array<i64: 0, 2>} : (tensor<4x5x6xf32>, tensor<3x5xf32>, tensor<3xi32>, tensor<3xi32>) -> tensor<4x5x6xf32>
// CHECK-NEXT:  %4 = mgb.indexing_incr_multi_axis_vec %x, %w, %i, %j {axes = array<i64: 0, 2>}
// CHECK-NEXT:  %5 = mgb.linspace %s, %s {num = 7 : i64, endpoint = false} : (tensor<1xf32>, tensor<1xf32>) -> tensor<7xf32>
// CHECK-LABEL: func.func @conv(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>, %b: tensor<1x6x1x1xf32>, %z: tensor<2x6x4x4xf32>, %gw: tensor<2x3x2x3x3xf32>) -> (tensor<2x6x8x8xf32>, tensor<2x6x4x4xf32>, tensor<2x6x4x4xf32>, tensor<2x6x6x6xf32>) {
// CHECK-NEXT:  %0 = mgb.convolution %x, %w {padding = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<2x6x8x8xf32>
// CHECK-NEXT:  %1 = mgb.conv_bias %x, %w, %b {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, nonline_mode = #mgb<nonline relu>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<1x6x1x1xf32>) -> tensor<2x6x4x4xf32>
// CHECK-NEXT:  %2 = mgb.conv_bias %x, %w, %b, %z {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<1x6x1x1xf32>, tensor<2x6x4x4xf32>) -> tensor<2x6x4x4xf32>
// CHECK-NEXT:  %3 = mgb.convolution %x, %gw {sparse = #mgb<sparse group>, mode = #mgb<conv_mode convolution>} : (tensor<2x4x8x8xf32>, tensor<2x3x2x3x3xf32>) -> tensor<2x6x6x6xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3 : tensor<2x6x8x8xf32>, tensor<2x6x4x4xf32>, tensor<2x6x4x4xf32>, tensor<2x6x6x6xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @elemwise_pool(%x: tensor<2x4x8x8xf32>, %c: tensor<1x4x1x1xf32>) -> (tensor<2x4x8x8xf32>, tensor<2x4x8x8xi1>, tensor<2x4x4x4xf32>, tensor<2x4x1x1xf32>) {
// CHECK-NEXT:  %0 = mgb.elemwise fuse_add_relu %x, %c : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:  %1 = mgb.elemwise lt %0, %x : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
// CHECK-NEXT:  %2 = mgb.elemwise fuse_mul_add3 %0, %c, %x {scope = "block.0"} : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:  %3 = mgb.pooling average %2 {window = array<i64: 3, 3>, stride = array<i64: 2, 2>, padding = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x4x4xf32>
// CHECK-NEXT:  %4 = mgb.adaptive_pooling max %2 {out_shape = array<i64: 1, 1>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x1x1xf32>
// CHECK-NEXT:  func.return %0, %1, %3, %4 : tensor<2x4x8x8xf32>, tensor<2x4x8x8xi1>, tensor<2x4x4x4xf32>, tensor<2x4x1x1xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @matmul(%a: tensor<3x5xf32>, %b: tensor<7x5xf32>, %ba: tensor<2x5x3xf16>, %bb: tensor<2x5x7xf16>) -> (tensor<3x7xf32>, tensor<2x3x7xf16>) {
// CHECK-NEXT:  %0 = mgb.matrix_mul %a, %b {transpose_b = true, compute_mode = #mgb<compute_mode float32>} : (tensor<3x5xf32>, tensor<7x5xf32>) -> tensor<3x7xf32>
// CHECK-NEXT:  %1 = mgb.batched_matrix_mul %ba, %bb {transpose_a = true} : (tensor<2x5x3xf16>, tensor<2x5x7xf16>) -> tensor<2x3x7xf16>
// CHECK-NEXT:  func.return %0, %1 : tensor<3x7xf32>, tensor<2x3x7xf16>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @shapes(%x: tensor<2x4x6xf32>, %y: tensor<2x1x6xf32>) -> (tensor<8x6xf32>, tensor<2x4x6xf32>, tensor<6x1x2x4xf32>, tensor<2x6xf32>, tensor<2x5x6xf32>, tensor<2x1x6xf32>, tensor<2x3x6xf32>, tensor<2x2x3xf32>) {
// CHECK-NEXT:  %0 = mgb.reshape %x : (tensor<2x4x6xf32>) -> tensor<8x6xf32>
// CHECK-NEXT:  %1 = mgb.broadcast %y : (tensor<2x1x6xf32>) -> tensor<2x4x6xf32>
// CHECK-NEXT:  %2 = mgb.dimshuffle %x {pattern = array<i64: 2, -1, 0, 1>} : (tensor<2x4x6xf32>) -> tensor<6x1x2x4xf32>
// CHECK-NEXT:  %3 = mgb.axis_add_remove %y {methods = [#mgb<axis_method remove>], axes = array<i64: 1>} : (tensor<2x1x6xf32>) -> tensor<2x6xf32>
// CHECK-NEXT:  %4 = mgb.concat %x, %y {axis = 1 : i64} : (tensor<2x4x6xf32>, tensor<2x1x6xf32>) -> tensor<2x5x6xf32>
// CHECK-NEXT:  %5, %6 = mgb.split %4 {axis = 1 : i64, sizes = array<i64: 1, 4>} : (tensor<2x5x6xf32>) -> (tensor<2x1x6xf32>, tensor<2x4x6xf32>)
// CHECK-NEXT:  %7 = mgb.subtensor %6 {axes = array<i64: 1, 2>, starts = array<i64: 0, 0>, stops = array<i64: 3, 6>, steps = array<i64: 1, 1>, drop = array<i64: 0, 0>} : (tensor<2x4x6xf32>) -> tensor<2x3x6xf32>
// CHECK-NEXT:  %8 = mgb.subtensor %x {axes = array<i64: 1, 2>, starts = array<i64: -1, 1>, stops = array<i64: 4, 6>, steps = array<i64: 1, 2>, drop = array<i64: 1, 0>} : (tensor<2x4x6xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %9 = mgb.reshape %8 : (tensor<2x3xf32>) -> tensor<2x1x3xf32>
// CHECK-NEXT:  %10 = mgb.padding %9 {front = array<i64: 0, 1, 0>, back = array<i64: 0, 0, 0>, value = 5.000000e-01 : f64} : (tensor<2x1x3xf32>) -> tensor<2x2x3xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5, %7, %10 : tensor<8x6xf32>, tensor<2x4x6xf32>, tensor<6x1x2x4xf32>, tensor<2x6xf32>, tensor<2x5x6xf32>, tensor<2x1x6xf32>, tensor<2x3x6xf32>, tensor<2x2x3xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @misc(%x: tensor<2x4x8x8xf32>, %p: tensor<1x4x1x1xf32>) -> (tensor<2x1x8x8xf32>, tensor<2x4x8x8xf16>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) {
// CHECK-NEXT:  %0 = mgb.reduce sum_sqr %x {axis = 1 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x1x8x8xf32>
// CHECK-NEXT:  %1 = mgb.typecvt %x : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf16>
// CHECK-NEXT:  %2 = mgb.softmax %x {axis = 1 : i64} : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:  %3 = mgb.batch_norm %x, %p, %p, %p, %p {epsilon = 1.000000e-03 : f64} : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3 : tensor<2x1x8x8xf32>, tensor<2x4x8x8xf16>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @quant(%x: tensor<1x4x8x8xf32>, %w: tensor<8x4x3x3x!mgb.quant<qint8, 0.05>>, %b: tensor<1x8x1x1x!mgb.quant<qint32, 0.005>>) -> tensor<1x8x6x6x!mgb.quant<quint8, 0.25, 128>> {
// CHECK-NEXT:  %0 = mgb.typecvt %x : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8x!mgb.quant<qint8, 0.1>>
// CHECK-NEXT:  %1 = mgb.conv_bias %0, %w, %b : (tensor<1x4x8x8x!mgb.quant<qint8, 0.1>>, tensor<8x4x3x3x!mgb.quant<qint8, 0.05>>, tensor<1x8x1x1x!mgb.quant<qint32, 0.005>>) -> tensor<1x8x6x6x!mgb.quant<quint8, 0.25, 128>>
// CHECK-NEXT:  func.return %1 : tensor<1x8x6x6x!mgb.quant<quint8, 0.25, 128>>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @quant_multi_type(%a: tensor<1x8x6x6x!mgb.quant<qint8, 0.1>>, %b: tensor<1x8x1x1x!mgb.quant<qint8, 0.2>>) -> (tensor<1x8x6x6x!mgb.quant<qint8, 0.3>>, tensor<1x8x6x6xi1>) {
// CHECK-NEXT:  %0 = mgb.elemwise_multi_type qfuse_add_relu %a, %b : (tensor<1x8x6x6x!mgb.quant<qint8, 0.1>>, tensor<1x8x1x1x!mgb.quant<qint8, 0.2>>) -> tensor<1x8x6x6x!mgb.quant<qint8, 0.3>>
// CHECK-NEXT:  %1 = mgb.elemwise_multi_type lt %a, %b : (tensor<1x8x6x6x!mgb.quant<qint8, 0.1>>, tensor<1x8x1x1x!mgb.quant<qint8, 0.2>>) -> tensor<1x8x6x6xi1>
// CHECK-NEXT:  func.return %0, %1 : tensor<1x8x6x6x!mgb.quant<qint8, 0.3>>, tensor<1x8x6x6xi1>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @vision(%x: tensor<2x4x5x7xf32>, %w: tensor<4x3x3x2xf32>, %gw: tensor<2x2x3x3x3xf32>, %lw: tensor<5x7xf32>) -> (tensor<2x3x10x9xf32>, tensor<2x6x9x13xf32>, tensor<2x4x9x3xf32>, tensor<2x4x10x14xf32>, tensor<2x4x5x7xf32>, tensor<2x4x5x7xf32>, tensor<2x1x5x7xi32>, tensor<2x4x5x1xi32>) {
// CHECK-NEXT:  %0 = mgb.convolution_backward_data %w, %x {stride = array<i64: 2, 1>, padding = array<i64: 1, 0>, dilation = array<i64: 1, 2>, output_padding = array<i64: 1, 0>} : (tensor<4x3x3x2xf32>, tensor<2x4x5x7xf32>) -> tensor<2x3x10x9xf32>
// CHECK-NEXT:  %1 = mgb.convolution_backward_data %gw, %x {stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, sparse = #mgb<sparse group>} : (tensor<2x2x3x3x3xf32>, tensor<2x4x5x7xf32>) -> tensor<2x6x9x13xf32>
// CHECK-NEXT:  %2 = mgb.resize %x {out_shape = array<i64: 9, 3>} : (tensor<2x4x5x7xf32>) -> tensor<2x4x9x3xf32>
// CHECK-NEXT:  %3 = mgb.resize %x {out_shape = array<i64: 10, 14>, imode = #mgb<interp nearest>} : (tensor<2x4x5x7xf32>) -> tensor<2x4x10x14xf32>
// CHECK-NEXT:  %4, %5, %6 = mgb.layer_norm %x, %lw, %lw {eps = 1.000000e-03 : f64, normalized_dim = 2 : i64, normalized_size = 35 : i64} : (tensor<2x4x5x7xf32>, tensor<5x7xf32>, tensor<5x7xf32>) -> (tensor<2x4x5x7xf32>, tensor<2x4xf32>, tensor<2x4xf32>)
// CHECK-NEXT:  %7, %8, %9 = mgb.layer_norm %x {affine = false, normalized_size = 7 : i64} : (tensor<2x4x5x7xf32>) -> (tensor<2x4x5x7xf32>, tensor<2x4x5xf32>, tensor<2x4x5xf32>)
// CHECK-NEXT:  %10 = mgb.argmax %x {axis = 1 : i64} : (tensor<2x4x5x7xf32>) -> tensor<2x1x5x7xi32>
// CHECK-NEXT:  %11 = mgb.argmin %x {axis = 3 : i64} : (tensor<2x4x5x7xf32>) -> tensor<2x4x5x1xi32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %7, %10, %11 : tensor<2x3x10x9xf32>, tensor<2x6x9x13xf32>, tensor<2x4x9x3xf32>, tensor<2x4x10x14xf32>, tensor<2x4x5x7xf32>, tensor<2x4x5x7xf32>, tensor<2x1x5x7xi32>, tensor<2x4x5x1xi32>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @consts() -> (tensor<2x3xf32>, tensor<4xi8>) {
// CHECK-NEXT:  %w = mgb.const #mgb.weight<"1a2b3c4d5e6f7081"> {name = "fc.weight"} : tensor<2x3xf32>
// CHECK-NEXT:  %q = mgb.const #mgb.weight<"0011223344556677"> : tensor<4xi8>
// CHECK-NEXT:  func.return %w, %q : tensor<2x3xf32>, tensor<4xi8>
// CHECK-NEXT:  }

// The generic form carries every property, defaults included, and the operand segments.
// GENERIC: %1 = "mgb.conv_bias"(%x, %w, %b) <{stride = array<i64: 2, 2>, padding = array<i64: 1, 1>, nonline_mode = #mgb<nonline relu>, operandSegmentSizes = array<i32: 1, 1, 1, 0>, {{.*}}}> : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<1x6x1x1xf32>) -> tensor<2x6x4x4xf32>
// GENERIC: operandSegmentSizes = array<i32: 1, 1, 1, 1>
// GENERIC: "mgb.elemwise"(%x, %c) <{mode = #mgb<elemwise_mode fuse_add_relu>}> : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>) -> tensor<2x4x8x8xf32>
// GENERIC: "mgb.elemwise"(%0, %c, %x) <{mode = #mgb<elemwise_mode fuse_mul_add3>}> {scope = "block.0"}
// GENERIC: %5, %6 = "mgb.split"(%4) <{axis = 1 : i64, sizes = array<i64: 1, 4>}> : (tensor<2x5x6xf32>) -> (tensor<2x1x6xf32>, tensor<2x4x6xf32>)
// GENERIC: "mgb.elemwise_multi_type"(%a, %b) <{mode = #mgb<elemwise_multi_type_mode qfuse_add_relu>}>
// GENERIC: "mgb.resize"(%x) <{out_shape = array<i64: 9, 3>, imode = #mgb<interp linear>, format = #mgb<format nchw>}>
// GENERIC: "mgb.const"() <{value = #mgb.weight<"1a2b3c4d5e6f7081">}> {name = "fc.weight"} : () -> tensor<2x3xf32>

func.func @scans(%x: tensor<2x5x3xf32>, %n: tensor<4x6xi32>, %i: tensor<2x3xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<4x6xi32>, tensor<2x1x3xf32>) {
  %0 = mgb.cumsum %x {axis = 1 : i64} : (tensor<2x5x3xf32>) -> tensor<2x5x3xf32>
  %1 = mgb.cumsum %x {axis = 2 : i64, exclusive = true, reverse = true} : (tensor<2x5x3xf32>) -> tensor<2x5x3xf32>
  %2 = mgb.cumsum %n {axis = 0 : i64, reverse = true} : (tensor<4x6xi32>) -> tensor<4x6xi32>
  %3 = mgb.indexing_one_hot %x, %i {axis = 1 : i64} : (tensor<2x5x3xf32>, tensor<2x3xi32>) -> tensor<2x1x3xf32>
  func.return %0, %1, %2, %3 : tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<4x6xi32>, tensor<2x1x3xf32>
}
// CHECK-LABEL: func.func @scans(%x: tensor<2x5x3xf32>, %n: tensor<4x6xi32>, %i: tensor<2x3xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<4x6xi32>, tensor<2x1x3xf32>) {
// CHECK-NEXT:  %0 = mgb.cumsum %x {axis = 1 : i64} : (tensor<2x5x3xf32>) -> tensor<2x5x3xf32>
// CHECK-NEXT:  %1 = mgb.cumsum %x {axis = 2 : i64, exclusive = true, reverse = true} : (tensor<2x5x3xf32>) -> tensor<2x5x3xf32>
// CHECK-NEXT:  %2 = mgb.cumsum %n {axis = 0 : i64, reverse = true} : (tensor<4x6xi32>) -> tensor<4x6xi32>
// CHECK-NEXT:  %3 = mgb.indexing_one_hot %x, %i {axis = 1 : i64} : (tensor<2x5x3xf32>, tensor<2x3xi32>) -> tensor<2x1x3xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3 : tensor<2x5x3xf32>, tensor<2x5x3xf32>, tensor<4x6xi32>, tensor<2x1x3xf32>
// CHECK-NEXT:  }
// GENERIC: "mgb.cumsum"(%x) <{axis = 2 : i64, exclusive = true, reverse = true}> : (tensor<2x5x3xf32>) -> tensor<2x5x3xf32>
// GENERIC: "mgb.indexing_one_hot"(%x, %i) <{axis = 1 : i64}> : (tensor<2x5x3xf32>, tensor<2x3xi32>) -> tensor<2x1x3xf32>

func.func @sorting(%x: tensor<3x7xf32>) -> (tensor<3x7xf32>, tensor<3x7xi32>, tensor<3x2xf32>, tensor<3x2xi32>, tensor<3xf32>, tensor<3xi32>) {
  %0, %1 = mgb.argsort %x {descending = true} : (tensor<3x7xf32>) -> (tensor<3x7xf32>, tensor<3x7xi32>)
  %2, %3 = mgb.topk %x {k = -2 : i64} : (tensor<3x7xf32>) -> (tensor<3x2xf32>, tensor<3x2xi32>)
  %4, %5 = mgb.topk %x {k = 4 : i64, mode = 0 : i64} : (tensor<3x7xf32>) -> (tensor<3xf32>, tensor<3xi32>)
  func.return %0, %1, %2, %3, %4, %5 : tensor<3x7xf32>, tensor<3x7xi32>, tensor<3x2xf32>, tensor<3x2xi32>, tensor<3xf32>, tensor<3xi32>
}
// CHECK-LABEL: func.func @sorting
// CHECK-NEXT:  %0, %1 = mgb.argsort %x {descending = true} : (tensor<3x7xf32>) -> (tensor<3x7xf32>, tensor<3x7xi32>)
// CHECK-NEXT:  %2, %3 = mgb.topk %x {k = -2 : i64} : (tensor<3x7xf32>) -> (tensor<3x2xf32>, tensor<3x2xi32>)
// CHECK-NEXT:  %4, %5 = mgb.topk %x {k = 4 : i64, mode = 0 : i64} : (tensor<3x7xf32>) -> (tensor<3xf32>, tensor<3xi32>)
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<3x7xf32>, tensor<3x7xi32>, tensor<3x2xf32>, tensor<3x2xi32>, tensor<3xf32>, tensor<3xi32>
// CHECK-NEXT:  }
// GENERIC: "mgb.argsort"(%x) <{descending = true}> : (tensor<3x7xf32>) -> (tensor<3x7xf32>, tensor<3x7xi32>)
// GENERIC: "mgb.topk"(%x) <{k = -2 : i64, mode = 2 : i64}> : (tensor<3x7xf32>) -> (tensor<3x2xf32>, tensor<3x2xi32>)

func.func @svd(%x: tensor<2x5x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>, tensor<2x5x5xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>) {
  %0, %1, %2 = mgb.svd %x : (tensor<2x5x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>)
  %3, %4, %5 = mgb.svd %x {full_matrices = true} : (tensor<2x5x3xf32>) -> (tensor<2x5x5xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>)
  func.return %0, %1, %2, %3, %4, %5 : tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>, tensor<2x5x5xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>
}
// CHECK-LABEL: func.func @svd
// CHECK-NEXT:  %0, %1, %2 = mgb.svd %x : (tensor<2x5x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>)
// CHECK-NEXT:  %3, %4, %5 = mgb.svd %x {full_matrices = true} : (tensor<2x5x3xf32>) -> (tensor<2x5x5xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>)
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5 : tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>, tensor<2x5x5xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>
// CHECK-NEXT:  }
// GENERIC: "mgb.svd"(%x) <{full_matrices = false}> : (tensor<2x5x3xf32>) -> (tensor<2x5x3xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>)
// GENERIC: "mgb.svd"(%x) <{full_matrices = true}> : (tensor<2x5x3xf32>) -> (tensor<2x5x5xf32>, tensor<2x3xf32>, tensor<2x3x3xf32>)

func.func @symbolic_shapes(%x: tensor<2x3x4xf32>, %m: tensor<2x3x4xi1>, %s: tensor<1xf32>) -> (tensor<3xi32>, tensor<2x12xf32>, tensor<6x4xf32>, tensor<5xf32>, tensor<5xi32>, tensor<?xf32>, tensor<?xi32>) {
  %0 = mgb.get_var_shape %x : (tensor<2x3x4xf32>) -> tensor<3xi32>
  %1 = mgb.subtensor %0 {axes = array<i64: 0>, starts = array<i64: 0>, stops = array<i64: 2>, steps = array<i64: 1>, drop = array<i64: 0>} : (tensor<3xi32>) -> tensor<2xi32>
  %2 = mgb.reshape_to %x, %1 {unspec_axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2xi32>) -> tensor<2x12xf32>
  %3 = mgb.broadcast_to %s, %1 : (tensor<1xf32>, tensor<2xi32>) -> tensor<6x4xf32>
  %4, %5 = mgb.cond_take %x, %m : (tensor<2x3x4xf32>, tensor<2x3x4xi1>) -> (tensor<5xf32>, tensor<5xi32>)
  %6, %7 = mgb.cond_take %x, %x {mode = 4 : i64, val = 5.000000e-01 : f64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<?xf32>, tensor<?xi32>)
  func.return %0, %2, %3, %4, %5, %6, %7 : tensor<3xi32>, tensor<2x12xf32>, tensor<6x4xf32>, tensor<5xf32>, tensor<5xi32>, tensor<?xf32>, tensor<?xi32>
}
// CHECK-LABEL: func.func @symbolic_shapes
// CHECK-NEXT:  %0 = mgb.get_var_shape %x : (tensor<2x3x4xf32>) -> tensor<3xi32>
// CHECK-NEXT:  %1 = mgb.subtensor %0 {axes = array<i64: 0>, starts = array<i64: 0>, stops = array<i64: 2>, steps = array<i64: 1>, drop = array<i64: 0>} : (tensor<3xi32>) -> tensor<2xi32>
// CHECK-NEXT:  %2 = mgb.reshape_to %x, %1 {unspec_axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2xi32>) -> tensor<2x12xf32>
// CHECK-NEXT:  %3 = mgb.broadcast_to %s, %1 : (tensor<1xf32>, tensor<2xi32>) -> tensor<6x4xf32>
// CHECK-NEXT:  %4, %5 = mgb.cond_take %x, %m : (tensor<2x3x4xf32>, tensor<2x3x4xi1>) -> (tensor<5xf32>, tensor<5xi32>)
// CHECK-NEXT:  %6, %7 = mgb.cond_take %x, %x {mode = 4 : i64, val = 5.000000e-01 : f64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<?xf32>, tensor<?xi32>)
// CHECK-NEXT:  func.return %0, %2, %3, %4, %5, %6, %7 : tensor<3xi32>, tensor<2x12xf32>, tensor<6x4xf32>, tensor<5xf32>, tensor<5xi32>, tensor<?xf32>, tensor<?xi32>
// CHECK-NEXT:  }
// GENERIC: "mgb.get_var_shape"(%x) : (tensor<2x3x4xf32>) -> tensor<3xi32>
// GENERIC: "mgb.reshape_to"(%x, %1) <{unspec_axis = 1 : i64}> : (tensor<2x3x4xf32>, tensor<2xi32>) -> tensor<2x12xf32>
// GENERIC: "mgb.broadcast_to"(%s, %1) : (tensor<1xf32>, tensor<2xi32>) -> tensor<6x4xf32>
// GENERIC: "mgb.cond_take"(%x, %m) <{mode = 0 : i64, val = 1.000000e+00 : f64, eps = 1.000000e-06 : f64}> : (tensor<2x3x4xf32>, tensor<2x3x4xi1>) -> (tensor<5xf32>, tensor<5xi32>)
// GENERIC: "mgb.cond_take"(%x, %x) <{mode = 4 : i64, val = 5.000000e-01 : f64, eps = 1.000000e-06 : f64}> : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> (tensor<?xf32>, tensor<?xi32>)

func.func @detection(%v: tensor<1x4x3x5x5xf32>, %w: tensor<2x2x2x3x3x3xf32>, %x: tensor<2x3x8x9xf32>, %m: tensor<3x3x3xf32>, %m2: tensor<2x3x3xf32>, %i: tensor<3xi32>, %r: tensor<4x5xf32>, %b: tensor<1x12x4xf32>) -> (tensor<1x4x3x3x5xf32>, tensor<2x3x4x5xf32>, tensor<3x3x6x6xf32>, tensor<4x3x2x3xf32>, tensor<4x3x2x3xi32>, tensor<4x3x3x2xf32>, tensor<4x3x3x2xi32>, tensor<1x5xi32>, tensor<1xi32>, tensor<2x25x6x7xf32>) {
  %0 = mgb.convolution3d %v, %w {stride = array<i64: 1, 2, 1>, padding = array<i64: 1, 1, 1>, sparse = #mgb<sparse group>} : (tensor<1x4x3x5x5xf32>, tensor<2x2x2x3x3x3xf32>) -> tensor<1x4x3x3x5xf32>
  %1 = mgb.warp_perspective %x, %m2 {out_shape = array<i64: 4, 5>} : (tensor<2x3x8x9xf32>, tensor<2x3x3xf32>) -> tensor<2x3x4x5xf32>
  %2 = mgb.warp_perspective %x, %m, %i {out_shape = array<i64: 6, 6>, bmode = #mgb<border constant>, border_val = 2.000000e+00 : f64} : (tensor<2x3x8x9xf32>, tensor<3x3x3xf32>, tensor<3xi32>) -> tensor<3x3x6x6xf32>
  %3, %4 = mgb.roi_align %x, %r {mode = #mgb<roi_mode max>, spatial_scale = 5.000000e-01 : f64, offset = 5.000000e-01 : f64, pooled_shape = array<i64: 2, 3>, sample_shape = array<i64: 2, 1>} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>) -> (tensor<4x3x2x3xf32>, tensor<4x3x2x3xi32>)
  %5, %6 = mgb.roi_pooling %x, %r {mode = #mgb<roi_mode average>, scale = 5.000000e-01 : f64, out_shape = array<i64: 3, 2>} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>) -> (tensor<4x3x3x2xf32>, tensor<4x3x3x2xi32>)
  %7, %8 = mgb.nms_keep %b {iou_thresh = 5.000000e-01 : f64, max_output = 5 : i64} : (tensor<1x12x4xf32>) -> (tensor<1x5xi32>, tensor<1xi32>)
  %9 = mgb.correlation %x, %x {kernel_size = 3 : i64, max_displacement = 2 : i64, pad_size = 2 : i64, is_multiply = false} : (tensor<2x3x8x9xf32>, tensor<2x3x8x9xf32>) -> tensor<2x25x6x7xf32>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9 : tensor<1x4x3x3x5xf32>, tensor<2x3x4x5xf32>, tensor<3x3x6x6xf32>, tensor<4x3x2x3xf32>, tensor<4x3x2x3xi32>, tensor<4x3x3x2xf32>, tensor<4x3x3x2xi32>, tensor<1x5xi32>, tensor<1xi32>, tensor<2x25x6x7xf32>
}

// CHECK-LABEL: func.func @detection
// CHECK-NEXT:  %0 = mgb.convolution3d %v, %w {stride = array<i64: 1, 2, 1>, padding = array<i64: 1, 1, 1>, sparse = #mgb<sparse group>} : (tensor<1x4x3x5x5xf32>, tensor<2x2x2x3x3x3xf32>) -> tensor<1x4x3x3x5xf32>
// CHECK-NEXT:  %1 = mgb.warp_perspective %x, %m2 {out_shape = array<i64: 4, 5>} : (tensor<2x3x8x9xf32>, tensor<2x3x3xf32>) -> tensor<2x3x4x5xf32>
// CHECK-NEXT:  %2 = mgb.warp_perspective %x, %m, %i {out_shape = array<i64: 6, 6>, bmode = #mgb<border constant>, border_val = 2.000000e+00 : f64} : (tensor<2x3x8x9xf32>, tensor<3x3x3xf32>, tensor<3xi32>) -> tensor<3x3x6x6xf32>
// CHECK-NEXT:  %3, %4 = mgb.roi_align %x, %r {mode = #mgb<roi_mode max>, spatial_scale = 5.000000e-01 : f64, offset = 5.000000e-01 : f64, pooled_shape = array<i64: 2, 3>, sample_shape = array<i64: 2, 1>} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>) -> (tensor<4x3x2x3xf32>, tensor<4x3x2x3xi32>)
// CHECK-NEXT:  %5, %6 = mgb.roi_pooling %x, %r {mode = #mgb<roi_mode average>, scale = 5.000000e-01 : f64, out_shape = array<i64: 3, 2>} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>) -> (tensor<4x3x3x2xf32>, tensor<4x3x3x2xi32>)
// CHECK-NEXT:  %7, %8 = mgb.nms_keep %b {iou_thresh = 5.000000e-01 : f64, max_output = 5 : i64} : (tensor<1x12x4xf32>) -> (tensor<1x5xi32>, tensor<1xi32>)
// CHECK-NEXT:  %9 = mgb.correlation %x, %x {kernel_size = 3 : i64, max_displacement = 2 : i64, pad_size = 2 : i64, is_multiply = false} : (tensor<2x3x8x9xf32>, tensor<2x3x8x9xf32>) -> tensor<2x25x6x7xf32>
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9 : tensor<1x4x3x3x5xf32>, tensor<2x3x4x5xf32>, tensor<3x3x6x6xf32>, tensor<4x3x2x3xf32>, tensor<4x3x2x3xi32>, tensor<4x3x3x2xf32>, tensor<4x3x3x2xi32>, tensor<1x5xi32>, tensor<1xi32>, tensor<2x25x6x7xf32>
// CHECK-NEXT:  }
// GENERIC: "mgb.convolution3d"(%v, %w) <{stride = array<i64: 1, 2, 1>, padding = array<i64: 1, 1, 1>, sparse = #mgb<sparse group>, dilation = array<i64: 1, 1, 1>, mode = #mgb<conv_mode cross_correlation>}> : (tensor<1x4x3x5x5xf32>, tensor<2x2x2x3x3x3xf32>) -> tensor<1x4x3x3x5xf32>
// GENERIC: "mgb.warp_perspective"(%x, %m2) <{out_shape = array<i64: 4, 5>, operandSegmentSizes = array<i32: 1, 1, 0>, imode = #mgb<interp linear>, bmode = #mgb<border replicate>, format = #mgb<format nchw>, border_val = 0.000000e+00 : f64}> : (tensor<2x3x8x9xf32>, tensor<2x3x3xf32>) -> tensor<2x3x4x5xf32>
// GENERIC: "mgb.warp_perspective"(%x, %m, %i) <{out_shape = array<i64: 6, 6>, bmode = #mgb<border constant>, border_val = 2.000000e+00 : f64, operandSegmentSizes = array<i32: 1, 1, 1>, imode = #mgb<interp linear>, format = #mgb<format nchw>}> : (tensor<2x3x8x9xf32>, tensor<3x3x3xf32>, tensor<3xi32>) -> tensor<3x3x6x6xf32>
// GENERIC: "mgb.roi_align"(%x, %r) <{mode = #mgb<roi_mode max>, spatial_scale = 5.000000e-01 : f64, offset = 5.000000e-01 : f64, pooled_shape = array<i64: 2, 3>, sample_shape = array<i64: 2, 1>}> : (tensor<2x3x8x9xf32>, tensor<4x5xf32>) -> (tensor<4x3x2x3xf32>, tensor<4x3x2x3xi32>)
// GENERIC: "mgb.roi_pooling"(%x, %r) <{mode = #mgb<roi_mode average>, scale = 5.000000e-01 : f64, out_shape = array<i64: 3, 2>}> : (tensor<2x3x8x9xf32>, tensor<4x5xf32>) -> (tensor<4x3x3x2xf32>, tensor<4x3x3x2xi32>)
// GENERIC: "mgb.nms_keep"(%b) <{iou_thresh = 5.000000e-01 : f64, max_output = 5 : i64}> : (tensor<1x12x4xf32>) -> (tensor<1x5xi32>, tensor<1xi32>)
// GENERIC: "mgb.correlation"(%x, %x) <{kernel_size = 3 : i64, max_displacement = 2 : i64, pad_size = 2 : i64, is_multiply = false, stride1 = 1 : i64, stride2 = 1 : i64}> : (tensor<2x3x8x9xf32>, tensor<2x3x8x9xf32>) -> tensor<2x25x6x7xf32>

func.func @image(%x: tensor<2x6x7x3xf32>, %u: tensor<2x6x7x3xui8>, %m: tensor<2x2x3xf32>, %n: tensor<2x3x8x9xf32>, %mp: tensor<2x4x5x2xf32>, %w: tensor<4x3x3x3xf32>, %o: tensor<2x18x6x7xf32>, %k: tensor<2x9x6x7xf32>, %rw: tensor<3x1x1x3x3xf32>, %ri: tensor<2x8x9xi32>, %ro: tensor<2x8x9xi32>, %r: tensor<4x5xf32>, %t: tensor<4x2x2x2xf32>) -> (tensor<2x5x4x3xf32>, tensor<2x5x4x3xui8>, tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32>, tensor<2x6x7x1xf32>, tensor<2x3x11x4xf32>, tensor<2x4x6x7xf32>, tensor<2x3x8x9xf32>, tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>) {
  %0 = mgb.warp_affine %x, %m {out_shape = array<i64: 5, 4>, imode = #mgb<interp cubic>, bmode = #mgb<border constant>, border_val = 5.000000e-01 : f64} : (tensor<2x6x7x3xf32>, tensor<2x2x3xf32>) -> tensor<2x5x4x3xf32>
  %1 = mgb.warp_affine %u, %m {out_shape = array<i64: 5, 4>} : (tensor<2x6x7x3xui8>, tensor<2x2x3xf32>) -> tensor<2x5x4x3xui8>
  %2 = mgb.warp_affine %n, %m {out_shape = array<i64: 5, 4>, format = #mgb<format nchw>} : (tensor<2x3x8x9xf32>, tensor<2x2x3xf32>) -> tensor<2x3x5x4xf32>
  %3 = mgb.remap %n, %mp {imode = #mgb<interp nearest>, bmode = #mgb<border wrap>, scalar = 1.500000e+00 : f64} : (tensor<2x3x8x9xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
  %4 = mgb.cvt_color %x {mode = #mgb<cvt_color_mode bgr2gray>} : (tensor<2x6x7x3xf32>) -> tensor<2x6x7x1xf32>
  %5 = mgb.resize %n {out_shape = array<i64: 11, 4>, imode = #mgb<interp cubic>} : (tensor<2x3x8x9xf32>) -> tensor<2x3x11x4xf32>
  %6 = mgb.deformable_conv %n, %w, %o, %k {padding = array<i64: 0, 1>, dilation = array<i64: 1, 2>} : (tensor<2x3x8x9xf32>, tensor<4x3x3x3xf32>, tensor<2x18x6x7xf32>, tensor<2x9x6x7xf32>) -> tensor<2x4x6x7xf32>
  %7 = mgb.region_restricted_conv %n, %rw, %ri, %ro {padding = array<i64: 1, 1>} : (tensor<2x3x8x9xf32>, tensor<3x1x1x3x3xf32>, tensor<2x8x9xi32>, tensor<2x8x9xi32>) -> tensor<2x3x8x9xf32>
  %8, %9 = mgb.deformable_psroi_pooling %n, %r, %t {no_trans = false, spatial_scale = 5.000000e-01 : f64, trans_std = 1.000000e-01 : f64, pooled_h = 2 : i64, pooled_w = 2 : i64, part_size = 2 : i64, sample_per_part = 2 : i64} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>, tensor<4x2x2x2xf32>) -> (tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>)
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9 : tensor<2x5x4x3xf32>, tensor<2x5x4x3xui8>, tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32>, tensor<2x6x7x1xf32>, tensor<2x3x11x4xf32>, tensor<2x4x6x7xf32>, tensor<2x3x8x9xf32>, tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>
}

// CHECK-LABEL: func.func @image
// CHECK-NEXT:  %0 = mgb.warp_affine %x, %m {out_shape = array<i64: 5, 4>, imode = #mgb<interp cubic>, bmode = #mgb<border constant>, border_val = 5.000000e-01 : f64} : (tensor<2x6x7x3xf32>, tensor<2x2x3xf32>) -> tensor<2x5x4x3xf32>
// CHECK-NEXT:  %1 = mgb.warp_affine %u, %m {out_shape = array<i64: 5, 4>} : (tensor<2x6x7x3xui8>, tensor<2x2x3xf32>) -> tensor<2x5x4x3xui8>
// CHECK-NEXT:  %2 = mgb.warp_affine %n, %m {out_shape = array<i64: 5, 4>, format = #mgb<format nchw>} : (tensor<2x3x8x9xf32>, tensor<2x2x3xf32>) -> tensor<2x3x5x4xf32>
// CHECK-NEXT:  %3 = mgb.remap %n, %mp {imode = #mgb<interp nearest>, bmode = #mgb<border wrap>, scalar = 1.500000e+00 : f64} : (tensor<2x3x8x9xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
// CHECK-NEXT:  %4 = mgb.cvt_color %x {mode = #mgb<cvt_color_mode bgr2gray>} : (tensor<2x6x7x3xf32>) -> tensor<2x6x7x1xf32>
// CHECK-NEXT:  %5 = mgb.resize %n {out_shape = array<i64: 11, 4>, imode = #mgb<interp cubic>} : (tensor<2x3x8x9xf32>) -> tensor<2x3x11x4xf32>
// CHECK-NEXT:  %6 = mgb.deformable_conv %n, %w, %o, %k {padding = array<i64: 0, 1>, dilation = array<i64: 1, 2>} : (tensor<2x3x8x9xf32>, tensor<4x3x3x3xf32>, tensor<2x18x6x7xf32>, tensor<2x9x6x7xf32>) -> tensor<2x4x6x7xf32>
// CHECK-NEXT:  %7 = mgb.region_restricted_conv %n, %rw, %ri, %ro {padding = array<i64: 1, 1>} : (tensor<2x3x8x9xf32>, tensor<3x1x1x3x3xf32>, tensor<2x8x9xi32>, tensor<2x8x9xi32>) -> tensor<2x3x8x9xf32>
// CHECK-NEXT:  %8, %9 = mgb.deformable_psroi_pooling %n, %r, %t {no_trans = false, spatial_scale = 5.000000e-01 : f64, trans_std = 1.000000e-01 : f64, pooled_h = 2 : i64, pooled_w = 2 : i64, part_size = 2 : i64, sample_per_part = 2 : i64} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>, tensor<4x2x2x2xf32>) -> (tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>)
// CHECK-NEXT:  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9 : tensor<2x5x4x3xf32>, tensor<2x5x4x3xui8>, tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32>, tensor<2x6x7x1xf32>, tensor<2x3x11x4xf32>, tensor<2x4x6x7xf32>, tensor<2x3x8x9xf32>, tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>
// CHECK-NEXT:  }
// GENERIC: "mgb.warp_affine"(%x, %m) <{out_shape = array<i64: 5, 4>, imode = #mgb<interp cubic>, bmode = #mgb<border constant>, border_val = 5.000000e-01 : f64, format = #mgb<format nhwc>}> : (tensor<2x6x7x3xf32>, tensor<2x2x3xf32>) -> tensor<2x5x4x3xf32>
// GENERIC: "mgb.warp_affine"(%u, %m) <{out_shape = array<i64: 5, 4>, imode = #mgb<interp linear>, bmode = #mgb<border replicate>, border_val = 0.000000e+00 : f64, format = #mgb<format nhwc>}> : (tensor<2x6x7x3xui8>, tensor<2x2x3xf32>) -> tensor<2x5x4x3xui8>
// GENERIC: "mgb.warp_affine"(%n, %m) <{out_shape = array<i64: 5, 4>, format = #mgb<format nchw>, imode = #mgb<interp linear>, bmode = #mgb<border replicate>, border_val = 0.000000e+00 : f64}> : (tensor<2x3x8x9xf32>, tensor<2x2x3xf32>) -> tensor<2x3x5x4xf32>
// GENERIC: "mgb.remap"(%n, %mp) <{imode = #mgb<interp nearest>, bmode = #mgb<border wrap>, scalar = 1.500000e+00 : f64, format = #mgb<format nchw>}> : (tensor<2x3x8x9xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
// GENERIC: "mgb.cvt_color"(%x) <{mode = #mgb<cvt_color_mode bgr2gray>}> : (tensor<2x6x7x3xf32>) -> tensor<2x6x7x1xf32>
// GENERIC: "mgb.resize"(%n) <{out_shape = array<i64: 11, 4>, imode = #mgb<interp cubic>, format = #mgb<format nchw>}> : (tensor<2x3x8x9xf32>) -> tensor<2x3x11x4xf32>
// GENERIC: "mgb.deformable_conv"(%n, %w, %o, %k) <{padding = array<i64: 0, 1>, dilation = array<i64: 1, 2>, stride = array<i64: 1, 1>, mode = #mgb<conv_mode cross_correlation>, sparse = #mgb<sparse dense>}> : (tensor<2x3x8x9xf32>, tensor<4x3x3x3xf32>, tensor<2x18x6x7xf32>, tensor<2x9x6x7xf32>) -> tensor<2x4x6x7xf32>
// GENERIC: "mgb.region_restricted_conv"(%n, %rw, %ri, %ro) <{padding = array<i64: 1, 1>, stride = array<i64: 1, 1>, dilation = array<i64: 1, 1>, mode = #mgb<conv_mode cross_correlation>}> : (tensor<2x3x8x9xf32>, tensor<3x1x1x3x3xf32>, tensor<2x8x9xi32>, tensor<2x8x9xi32>) -> tensor<2x3x8x9xf32>
// GENERIC: "mgb.deformable_psroi_pooling"(%n, %r, %t) <{no_trans = false, spatial_scale = 5.000000e-01 : f64, trans_std = 1.000000e-01 : f64, pooled_h = 2 : i64, pooled_w = 2 : i64, part_size = 2 : i64, sample_per_part = 2 : i64}> : (tensor<2x3x8x9xf32>, tensor<4x5xf32>, tensor<4x2x2x2xf32>) -> (tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>)

func.func @assert_equal(%e: tensor<2x3xf32>, %g: tensor<2x3xf32>, %err: tensor<1xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = mgb.assert_equal %e, %g, %err : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xf32>) -> tensor<2x3xf32>
  %1 = mgb.assert_equal %e, %g, %err {maxerr = 0.000000e+00 : f64, verbose = true} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xf32>) -> tensor<2x3xf32>
  func.return %0, %1 : tensor<2x3xf32>, tensor<2x3xf32>
}
// CHECK-LABEL: func.func @assert_equal
// CHECK-NEXT:  %0 = mgb.assert_equal %e, %g, %err : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %1 = mgb.assert_equal %e, %g, %err {maxerr = 0.000000e+00 : f64, verbose = true} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  func.return %0, %1 : tensor<2x3xf32>, tensor<2x3xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  }
// GENERIC: "mgb.assert_equal"(%e, %g, %err) <{maxerr = 1.000000e-04 : f64, verbose = false}> : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<1xf32>) -> tensor<2x3xf32>
