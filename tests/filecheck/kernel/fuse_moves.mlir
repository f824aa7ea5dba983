// kernel-fuse-moves: a chain of copies, concats and splits becomes one gather per value something
// else reads. ShuffleNet's channel shuffle (concat, reshape / transpose / reshape, two subtensors)
// leaves one gather of the odd channels, read by the relu; the even half, read only by the next
// concat, is never written: the second unit's gather reads its channels from %x and the first relu.
// A lone transpose keeps its copy kernel.
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2},kernel-fuse-moves{target=x86-avx2}' | filecheck %s
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2},kernel-fuse-moves{target=x86-avx2}' | filecheck %s --check-prefix=LONE

func.func @shuffle(%x: tensor<1x4x2x2xf32>, %y: tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32> {
  %0 = mgb.concat %x, %y {axis = 1 : i64} : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> tensor<1x8x2x2xf32>
  %1 = mgb.reshape %0 : (tensor<1x8x2x2xf32>) -> tensor<4x2x4xf32>
  %2 = mgb.dimshuffle %1 {pattern = array<i64: 1, 0, 2>} : (tensor<4x2x4xf32>) -> tensor<2x4x4xf32>
  %3 = mgb.reshape %2 : (tensor<2x4x4xf32>) -> tensor<2x1x4x2x2xf32>
  %4 = mgb.subtensor %3 {axes = array<i64: 0>, starts = array<i64: 0>, stops = array<i64: 1>, steps = array<i64: 1>, drop = array<i64: 1>} : (tensor<2x1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  %5 = mgb.subtensor %3 {axes = array<i64: 0>, starts = array<i64: 1>, stops = array<i64: 2>, steps = array<i64: 1>, drop = array<i64: 1>} : (tensor<2x1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  %6 = mgb.elemwise relu %5 : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  %7 = mgb.concat %4, %6 {axis = 1 : i64} : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> tensor<1x8x2x2xf32>
  %8 = mgb.reshape %7 : (tensor<1x8x2x2xf32>) -> tensor<4x2x4xf32>
  %9 = mgb.dimshuffle %8 {pattern = array<i64: 1, 0, 2>} : (tensor<4x2x4xf32>) -> tensor<2x4x4xf32>
  %10 = mgb.reshape %9 : (tensor<2x4x4xf32>) -> tensor<2x1x4x2x2xf32>
  %11 = mgb.subtensor %10 {axes = array<i64: 0>, starts = array<i64: 0>, stops = array<i64: 1>, steps = array<i64: 1>, drop = array<i64: 1>} : (tensor<2x1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  func.return %11 : tensor<1x4x2x2xf32>
}

func.func @lone(%x: tensor<2x3x5xf32>) -> tensor<5x2x3xf32> {
  %0 = mgb.dimshuffle %x {pattern = array<i64: 2, 0, 1>} : (tensor<2x3x5xf32>) -> tensor<5x2x3xf32>
  func.return %0 : tensor<5x2x3xf32>
}

// the odd channels: channels 1 and 3 of %x, then of %y (2 rows of 4 floats, every other row)
// CHECK-DAG:   kernel.def @[[ODD:gather_16_2p_[0-9a-f]+_f32]] = "gather" ["generic"] {elem = "f32", sources = 2 : i64, size = 16 : i64, pieces = {{\[}}[0 : i64, 0 : i64, 4 : i64, [2 : i64, 4 : i64], [4 : i64, 1 : i64], [8 : i64, 1 : i64]], [1 : i64, 8 : i64, 4 : i64, [2 : i64, 4 : i64], [4 : i64, 1 : i64], [8 : i64, 1 : i64]]]}
// the next unit's even channels: %x channel 0, %y channel 0, then channels 0 and 2 of the relu
// CHECK-DAG:   kernel.def @[[EVEN:gather_16_3p_[0-9a-f]+_f32]] = "gather" ["generic"] {elem = "f32", sources = 3 : i64, size = 16 : i64, pieces = {{\[}}[0 : i64, 0 : i64, 0 : i64, [4 : i64], [1 : i64], [1 : i64]], [1 : i64, 4 : i64, 0 : i64, [4 : i64], [1 : i64], [1 : i64]], [2 : i64, 8 : i64, 0 : i64, [2 : i64, 4 : i64], [4 : i64, 1 : i64], [8 : i64, 1 : i64]]]}
// CHECK:       func.func @shuffle
// CHECK-NEXT:    %[[B:.*]] = kernel.call @[[ODD]](%x, %y)
// CHECK-NEXT:    %[[R:.*]] = kernel.call @elemwise_relu_16_s1_f32(%[[B]])
// CHECK-NEXT:    %[[A:.*]] = kernel.call @[[EVEN]](%x, %y, %[[R]])
// CHECK-NEXT:    func.return %[[A]]
// CHECK-NOT:   @concat
// CHECK-NOT:   kernel.view

// LONE:       func.func @lone
// LONE-NEXT:    %[[T:.*]] = kernel.call @copy_5x6_s1x5_o0_f32(%x)
// LONE-NEXT:    func.return %[[T]]
