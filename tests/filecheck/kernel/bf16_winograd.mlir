// kernel-bf16-activations with the float32 F(4x4, 3x3) Winograd kernel between two bfloat16 1x1
// convs (conv2d_winograd_nchw88 on avx512bf16 reads its input and residual and stores its result as
// bfloat16): %3 (the 1x1 conv's result, the Winograd input and residual) and %6 (the Winograd
// result, the next 1x1 conv's input) become bfloat16; the model's input and output edges stay float32.
// RUN: xmge-opt %s -p 'kernel-bf16-activations{target="x86-avx512-nchw88+bf16"}' | filecheck %s

builtin.module {
  kernel.def @conv2d_winograd_nchw88_f4_n1_ic40_18x17_oc40_p1x1_f32_bias_res_RELU = "conv2d_winograd_nchw88" ["avx512bf16"] {n = 1 : i64, ih = 18 : i64, iw = 17 : i64, oh = 18 : i64, ow = 17 : i64, ph = 1 : i64, pw = 1 : i64, dtype = "f32", bias = 1 : i64, residual = 1 : i64, act = "relu", ic = 40 : i64, oc = 40 : i64, m = 4 : i64} workspace(377856)
  kernel.def @relayout_nchw88_to_plain_1x32x18x17_e4 = "relayout" ["avx2"] {src = "nchw88", dst = "plain", logical = [1 : i64, 32 : i64, 18 : i64, 17 : i64], split = [1 : i64, 4 : i64, 8 : i64, 18 : i64, 17 : i64], lstrides = [9792 : i64, 2448 : i64, 306 : i64, 17 : i64, 1 : i64], pstrides = [9792 : i64, 2448 : i64, 1 : i64, 136 : i64, 8 : i64], bounds = [], esize = 4 : i64}
  kernel.def @conv2d_nchw88_bf16_n1_ic40_18x17_oc32_k1x1_s1x1_p0x0 = "conv2d_nchw88_bf16" ["avx512bf16"] {n = 1 : i64, ih = 18 : i64, iw = 17 : i64, oh = 18 : i64, ow = 17 : i64, fh = 1 : i64, fw = 1 : i64, sh = 1 : i64, sw = 1 : i64, ph = 0 : i64, pw = 0 : i64, dh = 1 : i64, dw = 1 : i64, dtype = "f32", bias = 0 : i64, residual = 0 : i64, act = "identity", mode = "dense", ic = 40 : i64, oc = 32 : i64, groups = 1 : i64} workspace(24512)
  kernel.def @conv2d_nchw88_bf16_n1_ic16_18x17_oc40_k1x1_s1x1_p0x0_bias_RELU = "conv2d_nchw88_bf16" ["avx512bf16"] {n = 1 : i64, ih = 18 : i64, iw = 17 : i64, oh = 18 : i64, ow = 17 : i64, fh = 1 : i64, fw = 1 : i64, sh = 1 : i64, sw = 1 : i64, ph = 0 : i64, pw = 0 : i64, dh = 1 : i64, dw = 1 : i64, dtype = "f32", bias = 1 : i64, residual = 0 : i64, act = "relu", mode = "dense", ic = 16 : i64, oc = 40 : i64, groups = 1 : i64} workspace(9792)
  kernel.def @relayout_plain_to_nchw88_1x16x18x17_e4 = "relayout" ["avx2"] {src = "plain", dst = "nchw88", logical = [1 : i64, 16 : i64, 18 : i64, 17 : i64], split = [1 : i64, 2 : i64, 8 : i64, 18 : i64, 17 : i64], lstrides = [4896 : i64, 2448 : i64, 306 : i64, 17 : i64, 1 : i64], pstrides = [4896 : i64, 2448 : i64, 1 : i64, 136 : i64, 8 : i64], bounds = [], esize = 4 : i64}
  func.func @main(%arg: tensor<1x16x18x17xf32>) -> tensor<1x32x18x17xf32> attributes {input_names = ["arg_0"]} {
    %0 = kernel.call @relayout_plain_to_nchw88_1x16x18x17_e4(%arg) : (tensor<1x16x18x17xf32>) -> tensor<1x2x18x17x8xf32, #layout.fmt<nchw88>>
    %1 = kernel.weight #mgb.weight<"c441228876d74bbf"> : tensor<5x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>
    %2 = kernel.weight #mgb.weight<"a647d456dc49eb6f"> : tensor<1x5x1x1x8xf32, #layout.fmt<nchw88>>
    %3 = kernel.call @conv2d_nchw88_bf16_n1_ic16_18x17_oc40_k1x1_s1x1_p0x0_bias_RELU(%0, %1, %2) : (tensor<1x2x18x17x8xf32, #layout.fmt<nchw88>>, tensor<5x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>, tensor<1x5x1x1x8xf32, #layout.fmt<nchw88>>) -> tensor<1x5x18x17x8xf32, #layout.fmt<nchw88>>
    %4 = kernel.weight #mgb.weight<"fe6a7c2df230dfb9"> : tensor<5x5x3x3x8x8xf32, #layout.fmt<KCRSc8k8>>
    %5 = kernel.weight #mgb.weight<"f273c73609709124"> : tensor<1x5x1x1x8xf32, #layout.fmt<nchw88>>
    %6 = kernel.call @conv2d_winograd_nchw88_f4_n1_ic40_18x17_oc40_p1x1_f32_bias_res_RELU(%3, %4, %5, %3) : (tensor<1x5x18x17x8xf32, #layout.fmt<nchw88>>, tensor<5x5x3x3x8x8xf32, #layout.fmt<KCRSc8k8>>, tensor<1x5x1x1x8xf32, #layout.fmt<nchw88>>, tensor<1x5x18x17x8xf32, #layout.fmt<nchw88>>) -> tensor<1x5x18x17x8xf32, #layout.fmt<nchw88>>
    %7 = kernel.weight #mgb.weight<"3cccc908c16343e1"> : tensor<4x5x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>
    %8 = kernel.call @conv2d_nchw88_bf16_n1_ic40_18x17_oc32_k1x1_s1x1_p0x0(%6, %7) : (tensor<1x5x18x17x8xf32, #layout.fmt<nchw88>>, tensor<4x5x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>) -> tensor<1x4x18x17x8xf32, #layout.fmt<nchw88>>
    %9 = kernel.call @relayout_nchw88_to_plain_1x32x18x17_e4(%8) : (tensor<1x4x18x17x8xf32, #layout.fmt<nchw88>>) -> tensor<1x32x18x17xf32>
    func.return %9 : tensor<1x32x18x17xf32>
  }
}
// CHECK-DAG:   kernel.def @conv2d_winograd_nchw88_f4_n1_ic40_18x17_oc40_p1x1_f32_bias_res_RELU_xb_rb_yb = "conv2d_winograd_nchw88" ["avx512bf16"] {{.*}}bf16_args = [0 : i64, 3 : i64], bf16_outs = [0 : i64]}
// CHECK-DAG:   kernel.def @conv2d_nchw88_bf16_n1_ic16_18x17_oc40_k1x1_s1x1_p0x0_bias_RELU_yb = {{.*}}bf16_outs = [0 : i64]}
// CHECK-DAG:   kernel.def @conv2d_nchw88_bf16_n1_ic40_18x17_oc32_k1x1_s1x1_p0x0_xb = {{.*}}bf16_args = [0 : i64]}
// CHECK:       %[[A:.*]] = kernel.call @conv2d_nchw88_bf16_n1_ic16_18x17_oc40_k1x1_s1x1_p0x0_bias_RELU_yb(%0, %1, %2) : ({{.*}}) -> tensor<1x5x18x17x8xbf16, #layout.fmt<nchw88>>
// CHECK:       %[[B:.*]] = kernel.call @conv2d_winograd_nchw88_f4_n1_ic40_18x17_oc40_p1x1_f32_bias_res_RELU_xb_rb_yb(%[[A]], %4, %5, %[[A]]) : (tensor<1x5x18x17x8xbf16, #layout.fmt<nchw88>>, {{.*}}, tensor<1x5x18x17x8xbf16, #layout.fmt<nchw88>>) -> tensor<1x5x18x17x8xbf16, #layout.fmt<nchw88>>
// CHECK:       kernel.call @conv2d_nchw88_bf16_n1_ic40_18x17_oc32_k1x1_s1x1_p0x0_xb(%[[B]], %7) : (tensor<1x5x18x17x8xbf16, {{.*}}) -> tensor<1x4x18x17x8xf32, #layout.fmt<nchw88>>
// CHECK-NOT:   xbf16
// CHECK:       func.return
