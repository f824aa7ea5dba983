// kernel-bf16-activations: a kernel result becomes a bfloat16 tensor (same shape and layout) where
// its producer stores bfloat16 and every reader takes it at that argument (bf16_outs / bf16_args
// on the specialised definitions); a result a float32 kernel (relayout, pooling) or the function
// returns keeps float32. Here %2 (the input of two bfloat16 convs and the residual of one) becomes
// bfloat16; %4 (relayout to the output) and %7 (pooling) stay float32.
// RUN: xmge-opt %s -p 'kernel-bf16-activations{target="x86-avx512-nchw88+bf16"}' | filecheck %s

builtin.module {
  kernel.def @relayout_nchw88_to_plain_1x16x2x2_e4 = "relayout" ["avx2"] {src = "nchw88", dst = "plain", logical = [1 : i64, 16 : i64, 2 : i64, 2 : i64], split = [1 : i64, 2 : i64, 8 : i64, 2 : i64, 2 : i64], lstrides = [64 : i64, 32 : i64, 4 : i64, 2 : i64, 1 : i64], pstrides = [64 : i64, 32 : i64, 1 : i64, 16 : i64, 8 : i64], bounds = [], esize = 4 : i64}
  kernel.def @pool2d_nchw88_max_n1_c16_4x4_k2x2_s2x2_p0x0_f32 = "pool2d_nchw88" ["avx2"] {mode = "max", n = 1 : i64, c = 16 : i64, ih = 4 : i64, iw = 4 : i64, oh = 2 : i64, ow = 2 : i64, fh = 2 : i64, fw = 2 : i64, sh = 2 : i64, sw = 2 : i64, ph = 0 : i64, pw = 0 : i64, dtype = "f32"}
  kernel.def @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0 = "conv2d_nchw88_bf16" ["avx512bf16"] {n = 1 : i64, ih = 4 : i64, iw = 4 : i64, oh = 4 : i64, ow = 4 : i64, fh = 1 : i64, fw = 1 : i64, sh = 1 : i64, sw = 1 : i64, ph = 0 : i64, pw = 0 : i64, dh = 1 : i64, dw = 1 : i64, dtype = "f32", bias = 0 : i64, residual = 0 : i64, act = "identity", mode = "dense", ic = 16 : i64, oc = 16 : i64, groups = 1 : i64} workspace(512)
  kernel.def @relayout_nchw88_to_plain_1x16x4x4_e4 = "relayout" ["avx2"] {src = "nchw88", dst = "plain", logical = [1 : i64, 16 : i64, 4 : i64, 4 : i64], split = [1 : i64, 2 : i64, 8 : i64, 4 : i64, 4 : i64], lstrides = [256 : i64, 128 : i64, 16 : i64, 4 : i64, 1 : i64], pstrides = [256 : i64, 128 : i64, 1 : i64, 32 : i64, 8 : i64], bounds = [], esize = 4 : i64}
  kernel.def @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_res = "conv2d_nchw88_bf16" ["avx512bf16"] {n = 1 : i64, ih = 4 : i64, iw = 4 : i64, oh = 4 : i64, ow = 4 : i64, fh = 1 : i64, fw = 1 : i64, sh = 1 : i64, sw = 1 : i64, ph = 0 : i64, pw = 0 : i64, dh = 1 : i64, dw = 1 : i64, dtype = "f32", bias = 0 : i64, residual = 1 : i64, act = "identity", mode = "dense", ic = 16 : i64, oc = 16 : i64, groups = 1 : i64} workspace(512)
  kernel.def @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_RELU = "conv2d_nchw88_bf16" ["avx512bf16"] {n = 1 : i64, ih = 4 : i64, iw = 4 : i64, oh = 4 : i64, ow = 4 : i64, fh = 1 : i64, fw = 1 : i64, sh = 1 : i64, sw = 1 : i64, ph = 0 : i64, pw = 0 : i64, dh = 1 : i64, dw = 1 : i64, dtype = "f32", bias = 0 : i64, residual = 0 : i64, act = "relu", mode = "dense", ic = 16 : i64, oc = 16 : i64, groups = 1 : i64} workspace(512)
  kernel.def @relayout_plain_to_nchw88_1x16x4x4_e4 = "relayout" ["avx2"] {src = "plain", dst = "nchw88", logical = [1 : i64, 16 : i64, 4 : i64, 4 : i64], split = [1 : i64, 2 : i64, 8 : i64, 4 : i64, 4 : i64], lstrides = [256 : i64, 128 : i64, 16 : i64, 4 : i64, 1 : i64], pstrides = [256 : i64, 128 : i64, 1 : i64, 32 : i64, 8 : i64], bounds = [], esize = 4 : i64}
  func.func @main(%arg: tensor<1x16x4x4xf32>) -> (tensor<1x16x4x4xf32>, tensor<1x16x2x2xf32>) attributes {input_names = ["arg_0"]} {
    %0 = kernel.call @relayout_plain_to_nchw88_1x16x4x4_e4(%arg) : (tensor<1x16x4x4xf32>) -> tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>
    %1 = kernel.weight #mgb.weight<"8232b039de3ceca3"> : tensor<2x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>
    %2 = kernel.call @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_RELU(%0, %1) : (tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>, tensor<2x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>) -> tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>
    %3 = kernel.weight #mgb.weight<"8bcea7271170e952"> : tensor<2x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>
    %4 = kernel.call @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_res(%2, %3, %2) : (tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>, tensor<2x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>, tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>) -> tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>
    %5 = kernel.call @relayout_nchw88_to_plain_1x16x4x4_e4(%4) : (tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>) -> tensor<1x16x4x4xf32>
    %6 = kernel.weight #mgb.weight<"8bcea7271170e952"> : tensor<2x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>
    %7 = kernel.call @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0(%2, %6) : (tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>, tensor<2x2x1x1x8x8xf32, #layout.fmt<KCRSc8k8>>) -> tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>
    %8 = kernel.call @pool2d_nchw88_max_n1_c16_4x4_k2x2_s2x2_p0x0_f32(%7) : (tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>) -> tensor<1x2x2x2x8xf32, #layout.fmt<nchw88>>
    %9 = kernel.call @relayout_nchw88_to_plain_1x16x2x2_e4(%8) : (tensor<1x2x2x2x8xf32, #layout.fmt<nchw88>>) -> tensor<1x16x2x2xf32>
    func.return %5, %9 : tensor<1x16x4x4xf32>, tensor<1x16x2x2xf32>
  }
}

// CHECK-DAG:   kernel.def @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_RELU_yb = {{.*}}bf16_outs = [0 : i64]}
// CHECK-DAG:   kernel.def @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_res_xb_rb = {{.*}}bf16_args = [0 : i64, 2 : i64]}
// CHECK-DAG:   kernel.def @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_xb = {{.*}}bf16_args = [0 : i64]}
// CHECK:       %[[A:.*]] = kernel.call @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_RELU_yb(%0, %1) : ({{.*}}) -> tensor<1x2x4x4x8xbf16, #layout.fmt<nchw88>>
// CHECK:       %[[R:.*]] = kernel.call @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_res_xb_rb(%[[A]], %3, %[[A]]) : (tensor<1x2x4x4x8xbf16, {{.*}}, tensor<1x2x4x4x8xbf16, #layout.fmt<nchw88>>) -> tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>
// CHECK:       kernel.call @conv2d_nchw88_bf16_n1_ic16_4x4_oc16_k1x1_s1x1_p0x0_xb(%[[A]], %6) : ({{.*}}) -> tensor<1x2x4x4x8xf32, #layout.fmt<nchw88>>
// CHECK-NOT:   xbf16
// CHECK:       func.return
