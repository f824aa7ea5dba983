// The verifier rejects inconsistent layouts, naming the op and the problem.
// RUN: xmge-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @logical_mismatch(%x: tensor<1x8x2x2xf32>) -> tensor<1x4x2x2x4xf32, #layout.fmt<nchw44>> {
  %0 = layout.relayout %x : tensor<1x8x2x2xf32> -> tensor<1x4x2x2x4xf32, #layout.fmt<nchw44>>
  func.return %0 : tensor<1x4x2x2x4xf32, #layout.fmt<nchw44>>
}
// CHECK: layout.relayout: tensor<1x8x2x2xf32> holds a logical (1, 8, 2, 2) tensor but tensor<1x4x2x2x4xf32, #layout.fmt<nchw44>> holds (1, 16, 2, 2)

// -----
func.func @same_layout(%x: tensor<1x8x2x2xf32>) -> tensor<1x8x2x2xf32> {
  %0 = layout.relayout %x : tensor<1x8x2x2xf32> -> tensor<1x8x2x2xf32>
  func.return %0 : tensor<1x8x2x2xf32>
}
// CHECK: layout.relayout: source and result have the same layout

// -----
func.func @bad_block(%x: tensor<1x2x2x2x3xf32, #layout.fmt<nchw44>>) -> tensor<1x6x2x2xf32> {
  %0 = layout.relayout %x : tensor<1x2x2x2x3xf32, #layout.fmt<nchw44>> -> tensor<1x6x2x2xf32>
  func.return %0 : tensor<1x6x2x2xf32>
}
// CHECK: layout.relayout: NCHW->(N C/4 H W C%4): dimension C%4 must be 4, got shape (1, 2, 2, 2, 3)

// -----
func.func @conv_filter_layout(%x: tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>, %w: tensor<1x1x1x1x4x4xf32>) -> tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>> {
  %0 = mgb.convolution %x, %w {format = #mgb<format nchw44>} : (tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>, tensor<1x1x1x1x4x4xf32>) -> tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>
  func.return %0 : tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>
}
// CHECK: mgb.convolution: the filter must be #layout.fmt<KCRSc4k4>, got tensor<1x1x1x1x4x4xf32>

// -----
func.func @plain_op_on_blocked(%x: tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>) -> tensor<1x64xf32> {
  %0 = mgb.reshape %x : (tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>) -> tensor<1x64xf32>
  func.return %0 : tensor<1x64xf32>
}
// CHECK: mgb.reshape: takes plain tensors only, got tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>; relayout it first

// -----
func.func @mixed_elemwise(%x: tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>, %y: tensor<1x4x4x4xf32>) -> tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>> {
  %0 = mgb.elemwise add %x, %y : (tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>, tensor<1x4x4x4xf32>) -> tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>
  func.return %0 : tensor<1x1x4x4x4xf32, #layout.fmt<nchw44>>
}
// CHECK: mgb.elemwise add: operands mix layouts nchw44, plain; relayout them first
