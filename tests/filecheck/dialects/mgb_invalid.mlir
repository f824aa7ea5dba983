// The verifier rejects inconsistent shapes and dtypes, with a message naming the op and the problem.
// RUN: xmge-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @const_size(%x: tensor<1xf32>) -> tensor<2x3xf32> {
  %0 = mgb.const #mgb.weight<"c86e535c30403d76", "0x0000803f00000040"> : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
// CHECK: mgb.const: tensor<2x3xf32> needs 24 bytes of data, the weight holds 8

// -----
func.func @const_dtype() -> tensor<2xf64> {
  %0 = mgb.const #mgb.weight<"0011223344556677"> : tensor<2xf64>
  func.return %0 : tensor<2xf64>
}
// CHECK: mgb.const: unsupported element type f64 in tensor<2xf64>

// -----
func.func @conv_channels(%x: tensor<2x4x8x8xf32>, %w: tensor<6x3x3x3xf32>) -> tensor<2x6x6x6xf32> {
  %0 = mgb.convolution %x, %w : (tensor<2x4x8x8xf32>, tensor<6x3x3x3xf32>) -> tensor<2x6x6x6xf32>
  func.return %0 : tensor<2x6x6x6xf32>
}
// CHECK: mgb.convolution: input has 4 channels (shape (2, 4, 8, 8)) but the weight (6, 3, 3, 3) expects 3

// -----
func.func @conv_result(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>) -> tensor<2x6x8x8xf32> {
  %0 = mgb.convolution %x, %w : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>) -> tensor<2x6x8x8xf32>
  func.return %0 : tensor<2x6x8x8xf32>
}
// CHECK: mgb.convolution: result types tensor<2x6x8x8xf32> do not match the inferred tensor<2x6x6x6xf32>

// -----
func.func @conv_dtypes(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf16>) -> tensor<2x6x6x6xf32> {
  %0 = mgb.convolution %x, %w : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf16>) -> tensor<2x6x6x6xf32>
  func.return %0 : tensor<2x6x6x6xf32>
}
// CHECK: mgb.convolution: operands have different dtypes

// -----
func.func @conv_bias_z(%x: tensor<2x4x8x8xf32>, %w: tensor<6x4x3x3xf32>, %b: tensor<1x6x1x1xf32>, %z: tensor<2x6x5x5xf32>) -> tensor<2x6x6x6xf32> {
  %0 = mgb.conv_bias %x, %w, %b, %z : (tensor<2x4x8x8xf32>, tensor<6x4x3x3xf32>, tensor<1x6x1x1xf32>, tensor<2x6x5x5xf32>) -> tensor<2x6x6x6xf32>
  func.return %0 : tensor<2x6x6x6xf32>
}
// CHECK: mgb.conv_bias: z has shape (2, 6, 5, 5), the output is (2, 6, 6, 6)

// -----
func.func @elemwise_arity(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mgb.elemwise add %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: mgb.elemwise add: takes 2 inputs, got 1

// -----
func.func @elemwise_broadcast(%x: tensor<4x3xf32>, %y: tensor<4x2xf32>) -> tensor<4x3xf32> {
  %0 = mgb.elemwise mul %x, %y : (tensor<4x3xf32>, tensor<4x2xf32>) -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}
// CHECK: mgb.elemwise mul: shapes (4, 3), (4, 2) cannot be broadcast together

// -----
func.func @elemwise_dtypes(%x: tensor<4xf32>, %y: tensor<4xi32>) -> tensor<4xf32> {
  %0 = mgb.elemwise add %x, %y : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: mgb.elemwise add: inputs have different dtypes

// -----
func.func @elemwise_f64(%x: tensor<4xf64>) -> tensor<4xf64> {
  %0 = mgb.elemwise relu %x : (tensor<4xf64>) -> tensor<4xf64>
  func.return %0 : tensor<4xf64>
}
// CHECK: mgb.elemwise: unsupported element type f64 in tensor<4xf64>

// -----
func.func @pooling_padding(%x: tensor<1x2x8x8xf32>) -> tensor<1x2x5x5xf32> {
  %0 = mgb.pooling max %x {window = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 2, 2>} : (tensor<1x2x8x8xf32>) -> tensor<1x2x5x5xf32>
  func.return %0 : tensor<1x2x5x5xf32>
}
// CHECK: mgb.pooling: padding (2, 2) must be smaller than the window (2, 2)

// -----
func.func @adaptive_pooling_size(%x: tensor<1x2x8x8xf32>) -> tensor<1x2x0x1xf32> {
  %0 = mgb.adaptive_pooling average %x {out_shape = array<i64: 0, 1>} : (tensor<1x2x8x8xf32>) -> tensor<1x2x0x1xf32>
  func.return %0 : tensor<1x2x0x1xf32>
}
// CHECK: mgb.adaptive_pooling: invalid output size (0, 1)

// -----
func.func @matrix_mul_inner(%a: tensor<3x5xf32>, %b: tensor<4x7xf32>) -> tensor<3x7xf32> {
  %0 = mgb.matrix_mul %a, %b : (tensor<3x5xf32>, tensor<4x7xf32>) -> tensor<3x7xf32>
  func.return %0 : tensor<3x7xf32>
}
// CHECK: mgb.matrix_mul: inner dimensions differ: (3, 5) @ (4, 7) (after transposes) needs 5 == 4

// -----
func.func @batched_matrix_mul_batch(%a: tensor<2x3x5xf32>, %b: tensor<3x5x7xf32>) -> tensor<2x3x7xf32> {
  %0 = mgb.batched_matrix_mul %a, %b : (tensor<2x3x5xf32>, tensor<3x5x7xf32>) -> tensor<2x3x7xf32>
  func.return %0 : tensor<2x3x7xf32>
}
// CHECK: mgb.batched_matrix_mul: batch sizes differ: 2 and 3

// -----
func.func @reshape_count(%x: tensor<2x3xf32>) -> tensor<7xf32> {
  %0 = mgb.reshape %x : (tensor<2x3xf32>) -> tensor<7xf32>
  func.return %0 : tensor<7xf32>
}
// CHECK: mgb.reshape: cannot reshape (2, 3) into (7,)

// -----
func.func @reshape_dtype(%x: tensor<2x3xf32>) -> tensor<6xf16> {
  %0 = mgb.reshape %x : (tensor<2x3xf32>) -> tensor<6xf16>
  func.return %0 : tensor<6xf16>
}
// CHECK: mgb.reshape: result dtype must equal the input dtype

// -----
func.func @broadcast_shape(%x: tensor<2x3xf32>) -> tensor<4x3xf32> {
  %0 = mgb.broadcast %x : (tensor<2x3xf32>) -> tensor<4x3xf32>
  func.return %0 : tensor<4x3xf32>
}
// CHECK: mgb.broadcast: cannot broadcast (2, 3) to (4, 3)

// -----
func.func @dimshuffle_pattern(%x: tensor<2x3x4xf32>) -> tensor<4x2x2xf32> {
  %0 = mgb.dimshuffle %x {pattern = array<i64: 2, 0, 0>} : (tensor<2x3x4xf32>) -> tensor<4x2x2xf32>
  func.return %0 : tensor<4x2x2xf32>
}
// CHECK: mgb.dimshuffle: pattern (2, 0, 0) is not a permutation of the 3 input axes

// -----
func.func @axis_remove(%x: tensor<2x3xf32>) -> tensor<3xf32> {
  %0 = mgb.axis_add_remove %x {methods = [#mgb<axis_method remove>], axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}
// CHECK: mgb.axis_add_remove: cannot remove axis 0 of shape (2, 3)

// -----
func.func @concat_shapes(%x: tensor<2x3xf32>, %y: tensor<3x3xf32>) -> tensor<2x6xf32> {
  %0 = mgb.concat %x, %y {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x6xf32>
  func.return %0 : tensor<2x6xf32>
}
// CHECK: mgb.concat: input shapes (2, 3), (3, 3) differ outside axis 1

// -----
func.func @split_sizes(%x: tensor<2x5xf32>) -> tensor<2x2xf32> {
  %0, %1 = mgb.split %x {axis = 1 : i64, sizes = array<i64: 2, 2>} : (tensor<2x5xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>)
  func.return %0 : tensor<2x2xf32>
}
// CHECK: mgb.split: sizes (2, 2) do not add up to dimension 5 of (2, 5)

// -----
func.func @subtensor_axis(%x: tensor<2x5xf32>) -> tensor<2x5xf32> {
  %0 = mgb.subtensor %x {axes = array<i64: 2>, starts = array<i64: 0>, stops = array<i64: 1>, steps = array<i64: 1>, drop = array<i64: 0>} : (tensor<2x5xf32>) -> tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}
// CHECK: mgb.subtensor: axis 2 out of range for shape (2, 5)

// -----
func.func @reduce_axis(%x: tensor<2x5xf32>) -> tensor<2x1xf32> {
  %0 = mgb.reduce max %x {axis = 3 : i64} : (tensor<2x5xf32>) -> tensor<2x1xf32>
  func.return %0 : tensor<2x1xf32>
}
// CHECK: mgb.reduce: axis 3 out of range for shape (2, 5)

// -----
func.func @typecvt_shape(%x: tensor<2x5xf32>) -> tensor<10xf16> {
  %0 = mgb.typecvt %x : (tensor<2x5xf32>) -> tensor<10xf16>
  func.return %0 : tensor<10xf16>
}
// CHECK: mgb.typecvt: result shape (10,) must equal the input shape (2, 5)

// -----
func.func @softmax_int(%x: tensor<2x5xi32>) -> tensor<2x5xi32> {
  %0 = mgb.softmax %x {axis = 1 : i64} : (tensor<2x5xi32>) -> tensor<2x5xi32>
  func.return %0 : tensor<2x5xi32>
}
// CHECK: mgb.softmax: needs a float input, got int32

// -----
func.func @batch_norm_channels(%x: tensor<2x4x3x3xf32>, %p: tensor<1x3x1x1xf32>) -> tensor<2x4x3x3xf32> {
  %0 = mgb.batch_norm %x, %p, %p, %p, %p : (tensor<2x4x3x3xf32>, tensor<1x3x1x1xf32>, tensor<1x3x1x1xf32>, tensor<1x3x1x1xf32>, tensor<1x3x1x1xf32>) -> tensor<2x4x3x3xf32>
  func.return %0 : tensor<2x4x3x3xf32>
}
// CHECK: mgb.batch_norm: weight has shape (1, 3, 1, 1), expected (1, 4, 1, 1) for 4 channels

// -----
func.func @padding_negative(%x: tensor<2x5xf32>) -> tensor<2x4xf32> {
  %0 = mgb.padding %x {front = array<i64: 0, -1>, back = array<i64: 0, 0>} : (tensor<2x5xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}
// CHECK: mgb.padding: negative padding (0, -1) / (0, 0)

// -----
func.func @quant_kind(%x: tensor<4x!mgb.quant<qint9, 0.1>>) {
  func.return
}
// CHECK: unknown quantized dtype 'qint9'; expected one of

// -----
func.func @quant_scale(%x: tensor<4x!mgb.quant<qint8, -0.5>>) {
  func.return
}
// CHECK: quantized dtype qint8 needs a positive scale

// -----
func.func @float_result_of_quant(%x: tensor<4x!mgb.quant<qint8, 0.1>>) -> tensor<4xf32> {
  %0 = mgb.elemwise relu %x : (tensor<4x!mgb.quant<qint8, 0.1>>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: mgb.elemwise: result types tensor<4xf32> do not match the inferred tensor<4x!mgb.quant<qint8, 0.1>>

// -----
func.func @multi_type_plain(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mgb.elemwise_multi_type qadd %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: mgb.elemwise_multi_type qadd: needs quantized inputs, got f32, f32

// -----
func.func @multi_type_arity(%x: tensor<4x!mgb.quant<qint8, 0.1>>) -> tensor<4x!mgb.quant<qint8, 0.1>> {
  %0 = mgb.elemwise_multi_type qadd %x : (tensor<4x!mgb.quant<qint8, 0.1>>) -> tensor<4x!mgb.quant<qint8, 0.1>>
  func.return %0 : tensor<4x!mgb.quant<qint8, 0.1>>
}
// CHECK: mgb.elemwise_multi_type qadd: takes 2 inputs, got 1

// -----
func.func @conv_backward_data_channels(%w: tensor<3x3x3x3xf32>, %x: tensor<1x4x5x5xf32>) -> tensor<1x3x7x7xf32> {
  %0 = mgb.convolution_backward_data %w, %x : (tensor<3x3x3x3xf32>, tensor<1x4x5x5xf32>) -> tensor<1x3x7x7xf32>
  func.return %0 : tensor<1x3x7x7xf32>
}
// CHECK: mgb.convolution_backward_data: diff has 4 channels (shape (1, 4, 5, 5)) but the filter (3, 3, 3, 3) expects 3

// -----
func.func @conv_backward_data_output_padding(%w: tensor<4x3x3x3xf32>, %x: tensor<1x4x5x5xf32>) -> tensor<1x3x9x9xf32> {
  %0 = mgb.convolution_backward_data %w, %x {output_padding = array<i64: 2, 2>} : (tensor<4x3x3x3xf32>, tensor<1x4x5x5xf32>) -> tensor<1x3x9x9xf32>
  func.return %0 : tensor<1x3x9x9xf32>
}
// CHECK: mgb.convolution_backward_data: output_padding (2, 2) must be smaller than the stride (1, 1)

// -----
func.func @resize_rank(%x: tensor<4x5x7xf32>) -> tensor<4x9x3xf32> {
  %0 = mgb.resize %x {out_shape = array<i64: 9, 3>} : (tensor<4x5x7xf32>) -> tensor<4x9x3xf32>
  func.return %0 : tensor<4x9x3xf32>
}
// CHECK: mgb.resize: input must be 4-D NCHW, got shape (4, 5, 7)

// -----
func.func @resize_mode(%x: tensor<1x4x5x7xf32>) -> tensor<1x4x9x3xf32> {
  %0 = mgb.resize %x {out_shape = array<i64: 9, 3>, imode = #mgb<interp area>} : (tensor<1x4x5x7xf32>) -> tensor<1x4x9x3xf32>
  func.return %0 : tensor<1x4x9x3xf32>
}
// CHECK: mgb.resize: interpolation mode area is not supported

// -----
func.func @layer_norm_size(%x: tensor<2x5x7xf32>) -> tensor<2x5x7xf32> {
  %0, %1, %2 = mgb.layer_norm %x {affine = false, normalized_size = 5 : i64} : (tensor<2x5x7xf32>) -> (tensor<2x5x7xf32>, tensor<2x5xf32>, tensor<2x5xf32>)
  func.return %0 : tensor<2x5x7xf32>
}
// CHECK: mgb.layer_norm: normalized_dim 1 / normalized_size 5 do not fit the input shape (2, 5, 7)

// -----
func.func @layer_norm_weight(%x: tensor<2x5x7xf32>, %w: tensor<5xf32>) -> tensor<2x5x7xf32> {
  %0, %1, %2 = mgb.layer_norm %x, %w, %w {normalized_size = 7 : i64} : (tensor<2x5x7xf32>, tensor<5xf32>, tensor<5xf32>) -> (tensor<2x5x7xf32>, tensor<2x5xf32>, tensor<2x5xf32>)
  func.return %0 : tensor<2x5x7xf32>
}
// CHECK: mgb.layer_norm: weight has shape (5,), expected (7,)

// -----
func.func @argmax_axis(%x: tensor<2x5xf32>) -> tensor<2x1xi32> {
  %0 = mgb.argmax %x {axis = 2 : i64} : (tensor<2x5xf32>) -> tensor<2x1xi32>
  func.return %0 : tensor<2x1xi32>
}
// CHECK: mgb.argmax: axis 2 out of range for shape (2, 5)

// -----
func.func @argmin_result(%x: tensor<2x5xf32>) -> tensor<2x1xf32> {
  %0 = mgb.argmin %x {axis = 1 : i64} : (tensor<2x5xf32>) -> tensor<2x1xf32>
  func.return %0 : tensor<2x1xf32>
}
// CHECK: mgb.argmin: result types tensor<2x1xf32> do not match the inferred tensor<2x1xi32>

// -----
func.func @set_subtensor_value(%x: tensor<4x5xf32>, %v: tensor<3xf32>) -> tensor<4x5xf32> {
  %0 = mgb.set_subtensor %x, %v {axes = array<i64: 0>, starts = array<i64: 1>, stops = array<i64: 2>, steps = array<i64: 1>, drop = array<i64: 1>} : (tensor<4x5xf32>, tensor<3xf32>) -> tensor<4x5xf32>
  func.return %0 : tensor<4x5xf32>
}
// CHECK: mgb.set_subtensor: value of shape (3,) for a slice of shape (5,)

// -----
func.func @incr_subtensor_dtype(%x: tensor<4x5xf32>, %v: tensor<5xi32>) -> tensor<4x5xf32> {
  %0 = mgb.incr_subtensor %x, %v {axes = array<i64: 0>, starts = array<i64: 1>, stops = array<i64: 2>, steps = array<i64: 1>, drop = array<i64: 1>} : (tensor<4x5xf32>, tensor<5xi32>) -> tensor<4x5xf32>
  func.return %0 : tensor<4x5xf32>
}
// CHECK: mgb.incr_subtensor: operands have different dtypes

// -----
func.func @indexing_dtype(%x: tensor<4x5xf32>, %i: tensor<3xf32>) -> tensor<3x5xf32> {
  %0 = mgb.indexing_multi_axis_vec %x, %i {axes = array<i64: 0>} : (tensor<4x5xf32>, tensor<3xf32>) -> tensor<3x5xf32>
  func.return %0 : tensor<3x5xf32>
}
// CHECK: mgb.indexing_multi_axis_vec: indices must be int32

// -----
func.func @indexing_set_axes(%x: tensor<4x5xf32>, %v: tensor<3xf32>, %i: tensor<3xi32>, %j: tensor<3xi32>) -> tensor<4x5xf32> {
  %0 = mgb.indexing_set_multi_axis_vec %x, %v, %i, %j {axes = array<i64: 1, 0>} : (tensor<4x5xf32>, tensor<3xf32>, tensor<3xi32>, tensor<3xi32>) -> tensor<4x5xf32>
  func.return %0 : tensor<4x5xf32>
}
// CHECK: mgb.indexing_set_multi_axis_vec: axes [1, 0] must be ascending

// -----
func.func @indexing_incr_value(%x: tensor<4x5xf32>, %v: tensor<2x5xf32>, %i: tensor<3xi32>) -> tensor<4x5xf32> {
  %0 = mgb.indexing_incr_multi_axis_vec %x, %v, %i {axes = array<i64: 0>} : (tensor<4x5xf32>, tensor<2x5xf32>, tensor<3xi32>) -> tensor<4x5xf32>
  func.return %0 : tensor<4x5xf32>
}
// CHECK: mgb.indexing_incr_multi_axis_vec: value of shape (2, 5) for a selection of shape (3, 5)

// -----
func.func @linspace_start(%s: tensor<2xf32>) -> tensor<4xf32> {
  %0 = mgb.linspace %s, %s {num = 4 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: mgb.linspace: start must be a one-element float tensor

// -----
func.func @cumsum_axis(%x: tensor<2x5xf32>) -> tensor<2x5xf32> {
  %0 = mgb.cumsum %x {axis = 2 : i64} : (tensor<2x5xf32>) -> tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}
// CHECK: mgb.cumsum: axis 2 out of range for shape (2, 5)

// -----
func.func @cumsum_bool(%x: tensor<2x5xi1>) -> tensor<2x5xi1> {
  %0 = mgb.cumsum %x {axis = 1 : i64} : (tensor<2x5xi1>) -> tensor<2x5xi1>
  func.return %0 : tensor<2x5xi1>
}
// CHECK: mgb.cumsum: needs a float or integer input, got bool

// -----
func.func @cumsum_result(%x: tensor<2x5xf32>) -> tensor<2x5xi32> {
  %0 = mgb.cumsum %x {axis = 1 : i64} : (tensor<2x5xf32>) -> tensor<2x5xi32>
  func.return %0 : tensor<2x5xi32>
}
// CHECK: mgb.cumsum: result types tensor<2x5xi32> do not match the inferred tensor<2x5xf32>

// -----
func.func @indexing_one_hot_index_shape(%x: tensor<2x5x3xf32>, %i: tensor<2x5xi32>) -> tensor<2x1x3xf32> {
  %0 = mgb.indexing_one_hot %x, %i {axis = 1 : i64} : (tensor<2x5x3xf32>, tensor<2x5xi32>) -> tensor<2x1x3xf32>
  func.return %0 : tensor<2x1x3xf32>
}
// CHECK: mgb.indexing_one_hot: index has shape (2, 5), expected (2, 3) for (2, 5, 3)

// -----
func.func @indexing_one_hot_index_dtype(%x: tensor<2x5xf32>, %i: tensor<2xf32>) -> tensor<2x1xf32> {
  %0 = mgb.indexing_one_hot %x, %i {axis = 1 : i64} : (tensor<2x5xf32>, tensor<2xf32>) -> tensor<2x1xf32>
  func.return %0 : tensor<2x1xf32>
}
// CHECK: mgb.indexing_one_hot: index must be int32, got float32

// -----
func.func @indexing_one_hot_rank(%x: tensor<5xf32>, %i: tensor<i32>) -> tensor<1xf32> {
  %0 = mgb.indexing_one_hot %x, %i {axis = 0 : i64} : (tensor<5xf32>, tensor<i32>) -> tensor<1xf32>
  func.return %0 : tensor<1xf32>
}
// CHECK: mgb.indexing_one_hot: needs an input of 2 or more dimensions, got shape (5,)

// -----
func.func @indexing_one_hot_result(%x: tensor<2x5xf32>, %i: tensor<2xi32>) -> tensor<2xf32> {
  %0 = mgb.indexing_one_hot %x, %i {axis = 1 : i64} : (tensor<2x5xf32>, tensor<2xi32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
// CHECK: mgb.indexing_one_hot: result types tensor<2xf32> do not match the inferred tensor<2x1xf32>

// -----
func.func @argsort_rank(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xi32>) {
  %0, %1 = mgb.argsort %x : (tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xi32>)
  func.return %0, %1 : tensor<2x3x4xf32>, tensor<2x3x4xi32>
}
// CHECK: mgb.argsort: sorts the rows of a 2-D tensor, got shape (2, 3, 4)

// -----
func.func @topk_k(%x: tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<2x4xi32>) {
  %0, %1 = mgb.topk %x {k = 4 : i64} : (tensor<2x3xf32>) -> (tensor<2x4xf32>, tensor<2x4xi32>)
  func.return %0, %1 : tensor<2x4xf32>, tensor<2x4xi32>
}
// CHECK: mgb.topk: k=4 must be non-zero with |k| <= 3 (the row length)

// -----
func.func @svd_vector(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0, %1, %2 = mgb.svd %x : (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  func.return %1 : tensor<3xf32>
}
// CHECK: mgb.svd: needs a (..., M, N) input with 2 or more axes, got shape (3,)

// -----
func.func @conv3d_channels(%v: tensor<1x4x3x5x5xf32>, %w: tensor<2x3x1x1x1xf32>) -> tensor<1x2x3x5x5xf32> {
  %0 = mgb.convolution3d %v, %w : (tensor<1x4x3x5x5xf32>, tensor<2x3x1x1x1xf32>) -> tensor<1x2x3x5x5xf32>
  func.return %0 : tensor<1x2x3x5x5xf32>
}
// CHECK: mgb.convolution3d: input has 4 channels (shape (1, 4, 3, 5, 5)) but the weight (2, 3, 1, 1, 1) expects 3

// -----
func.func @warp_mat(%x: tensor<2x3x8x9xf32>, %m: tensor<2x2x3xf32>) -> tensor<2x3x4x5xf32> {
  %0 = mgb.warp_perspective %x, %m {out_shape = array<i64: 4, 5>} : (tensor<2x3x8x9xf32>, tensor<2x2x3xf32>) -> tensor<2x3x4x5xf32>
  func.return %0 : tensor<2x3x4x5xf32>
}
// CHECK: mgb.warp_perspective: mat must be (N, 3, 3), got shape (2, 2, 3)

// -----
func.func @roi_align_rois(%x: tensor<2x3x8x9xf32>, %r: tensor<4x4xf32>) -> (tensor<4x3x2x2xf32>, tensor<4x3x2x2xi32>) {
  %0, %1 = mgb.roi_align %x, %r {pooled_shape = array<i64: 2, 2>} : (tensor<2x3x8x9xf32>, tensor<4x4xf32>) -> (tensor<4x3x2x2xf32>, tensor<4x3x2x2xi32>)
  func.return %0, %1 : tensor<4x3x2x2xf32>, tensor<4x3x2x2xi32>
}
// CHECK: mgb.roi_align: rois must be (K, 5) rows of (batch index, x1, y1, x2, y2), got (4, 4)

// -----
func.func @roi_pooling_size(%x: tensor<2x3x8x9xf32>, %r: tensor<4x5xf32>) -> (tensor<4x3x0x2xf32>, tensor<4x3x0x2xi32>) {
  %0, %1 = mgb.roi_pooling %x, %r {out_shape = array<i64: 0, 2>} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>) -> (tensor<4x3x0x2xf32>, tensor<4x3x0x2xi32>)
  func.return %0, %1 : tensor<4x3x0x2xf32>, tensor<4x3x0x2xi32>
}
// CHECK: mgb.roi_pooling: invalid output size (0, 2)

// -----
func.func @nms_boxes(%b: tensor<12x4xf32>) -> (tensor<1x5xi32>, tensor<1xi32>) {
  %0, %1 = mgb.nms_keep %b {iou_thresh = 5.000000e-01 : f64, max_output = 5 : i64} : (tensor<12x4xf32>) -> (tensor<1x5xi32>, tensor<1xi32>)
  func.return %0, %1 : tensor<1x5xi32>, tensor<1xi32>
}
// CHECK: mgb.nms_keep: boxes must be (B, N, 4), got shape (12, 4)

// -----
func.func @correlation_kernel(%x: tensor<2x3x8x9xf32>) -> tensor<2x9x6x7xf32> {
  %0 = mgb.correlation %x, %x {kernel_size = 2 : i64} : (tensor<2x3x8x9xf32>, tensor<2x3x8x9xf32>) -> tensor<2x9x6x7xf32>
  func.return %0 : tensor<2x9x6x7xf32>
}
// CHECK: mgb.correlation: kernel_size 2 must be odd and positive, strides (1, 1) positive, max_displacement 1 and pad_size 0 non-negative

// -----
func.func @warp_affine_mat(%x: tensor<2x6x7x3xf32>, %m: tensor<2x3x3xf32>) -> tensor<2x5x4x3xf32> {
  %0 = mgb.warp_affine %x, %m {out_shape = array<i64: 5, 4>} : (tensor<2x6x7x3xf32>, tensor<2x3x3xf32>) -> tensor<2x5x4x3xf32>
  func.return %0 : tensor<2x5x4x3xf32>
}
// CHECK: mgb.warp_affine: mat must be (2, 2, 3), got shape (2, 3, 3)

// -----
func.func @warp_affine_nchw_cubic(%x: tensor<2x3x8x9xf32>, %m: tensor<2x2x3xf32>) -> tensor<2x3x5x4xf32> {
  %0 = mgb.warp_affine %x, %m {out_shape = array<i64: 5, 4>, imode = #mgb<interp cubic>, format = #mgb<format nchw>} : (tensor<2x3x8x9xf32>, tensor<2x2x3xf32>) -> tensor<2x3x5x4xf32>
  func.return %0 : tensor<2x3x5x4xf32>
}
// CHECK: mgb.warp_affine: NCHW supports linear interpolation only, got CUBIC

// -----
func.func @remap_map(%x: tensor<2x3x8x9xf32>, %m: tensor<2x4x5x3xf32>) -> tensor<2x3x4x5xf32> {
  %0 = mgb.remap %x, %m : (tensor<2x3x8x9xf32>, tensor<2x4x5x3xf32>) -> tensor<2x3x4x5xf32>
  func.return %0 : tensor<2x3x4x5xf32>
}
// CHECK: mgb.remap: map_xy must be (2, OH, OW, 2), got shape (2, 4, 5, 3)

// -----
func.func @cvt_color_channels(%x: tensor<2x6x7x4xf32>) -> tensor<2x6x7x1xf32> {
  %0 = mgb.cvt_color %x {mode = #mgb<cvt_color_mode rgb2gray>} : (tensor<2x6x7x4xf32>) -> tensor<2x6x7x1xf32>
  func.return %0 : tensor<2x6x7x1xf32>
}
// CHECK: mgb.cvt_color: mode RGB2GRAY needs NHWC images of 3 channels, got (2, 6, 7, 4)

// -----
func.func @deformable_conv_mask(%x: tensor<2x3x8x9xf32>, %w: tensor<4x3x3x3xf32>, %o: tensor<2x18x6x7xf32>, %k: tensor<2x8x6x7xf32>) -> tensor<2x4x6x7xf32> {
  %0 = mgb.deformable_conv %x, %w, %o, %k : (tensor<2x3x8x9xf32>, tensor<4x3x3x3xf32>, tensor<2x18x6x7xf32>, tensor<2x8x6x7xf32>) -> tensor<2x4x6x7xf32>
  func.return %0 : tensor<2x4x6x7xf32>
}
// CHECK: mgb.deformable_conv: mask must be (2, 9, 6, 7), got (2, 8, 6, 7)

// -----
func.func @region_restricted_conv_ids(%x: tensor<2x3x8x9xf32>, %w: tensor<3x1x1x3x3xf32>, %ri: tensor<2x8x9xi32>, %ro: tensor<2x6x7xui8>) -> tensor<2x3x6x7xf32> {
  %0 = mgb.region_restricted_conv %x, %w, %ri, %ro : (tensor<2x3x8x9xf32>, tensor<3x1x1x3x3xf32>, tensor<2x8x9xi32>, tensor<2x6x7xui8>) -> tensor<2x3x6x7xf32>
  func.return %0 : tensor<2x3x6x7xf32>
}
// CHECK: mgb.region_restricted_conv: rin and rout must both be int32 or both uint8, got ['int32', 'uint8']

// -----
func.func @deformable_psroi_pooling_trans(%x: tensor<2x3x8x9xf32>, %r: tensor<4x5xf32>, %t: tensor<2x2x2x2xf32>) -> (tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>) {
  %0, %1 = mgb.deformable_psroi_pooling %x, %r, %t {no_trans = false, pooled_h = 2 : i64, pooled_w = 2 : i64, part_size = 2 : i64} : (tensor<2x3x8x9xf32>, tensor<4x5xf32>, tensor<2x2x2x2xf32>) -> (tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>)
  func.return %0, %1 : tensor<4x3x2x2xf32>, tensor<4x3x2x2xf32>
}
// CHECK: mgb.deformable_psroi_pooling: trans has 2 rows for 4 rois (one per roi)

// -----
func.func @get_var_shape_rank(%x: tensor<2x3x4xf32>) -> tensor<2xi32> {
  %0 = mgb.get_var_shape %x : (tensor<2x3x4xf32>) -> tensor<2xi32>
  func.return %0 : tensor<2xi32>
}
// CHECK: mgb.get_var_shape: result types tensor<2xi32> do not match the inferred tensor<3xi32>

// -----
func.func @reshape_to_shape(%x: tensor<2x3x4xf32>, %s: tensor<3xi32>) -> tensor<2x12xf32> {
  %0 = mgb.reshape_to %x, %s : (tensor<2x3x4xf32>, tensor<3xi32>) -> tensor<2x12xf32>
  func.return %0 : tensor<2x12xf32>
}
// CHECK: mgb.reshape_to: shape must be an int32 vector of 2 values, got tensor<3xi32>

// -----
func.func @broadcast_to_shape(%x: tensor<3xf32>, %s: tensor<2xi32>) -> tensor<2x4xf32> {
  %0 = mgb.broadcast_to %x, %s : (tensor<3xf32>, tensor<2xi32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}
// CHECK: mgb.broadcast_to: cannot broadcast (3,) to (2, 4)

// -----
func.func @cond_take_mask(%x: tensor<2x3xf32>, %m: tensor<3x2xi1>) -> (tensor<?xf32>, tensor<?xi32>) {
  %0, %1 = mgb.cond_take %x, %m : (tensor<2x3xf32>, tensor<3x2xi1>) -> (tensor<?xf32>, tensor<?xi32>)
  func.return %0, %1 : tensor<?xf32>, tensor<?xi32>
}
// CHECK: mgb.cond_take: mask shape (3, 2) differs from data (2, 3)

// -----
func.func @assert_equal_err(%e: tensor<2x3xf32>, %g: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = mgb.assert_equal %e, %g, %g : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
// CHECK: mgb.assert_equal: err must hold one value, got shape (2, 3)
