// kernel-fuse-epilogue: the bias add, the residual add and the activation after a kernel whose
// EpilogueSupport allows them fold into that kernel's call (a specialised symbol, the bias and the
// residual as extra operands); what the kernel cannot apply stays a call of its own.
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2},kernel-fuse-epilogue{target=x86-avx2}' | filecheck %s
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2},kernel-fuse-epilogue{target=x86-avx2}' | filecheck %s --check-prefix=PARTIAL

func.func @dense(%x: tensor<2x3xf32>, %r: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %w = mgb.const #mgb.weight<"25e5f9d51057ff0a", "0xcdcccc3dcdccccbd9a99193fcdcccc3d000000bfcdcccc3e6666a63f6666663f333333bf6666a6bf9a9919bf00000000"> : tensor<3x4xf32>
  %0 = mgb.matrix_mul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %b = mgb.const #mgb.weight<"611dff8219a7ada5", "0x333313c0cdcc4cbe9a9999bf333333bf"> : tensor<4xf32>
  %1 = mgb.elemwise add %0, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = mgb.elemwise add %1, %r : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %3 = mgb.elemwise relu %2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %3 : tensor<2x4xf32>
}

// a square root is no epilogue any unit applies: it stays a call of its own after the product
func.func @sqrt_after(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %w = mgb.const #mgb.weight<"25e5f9d51057ff0a", "0xcdcccc3dcdccccbd9a99193fcdcccc3d000000bfcdcccc3e6666a63f6666663f333333bf6666a6bf9a9919bf00000000"> : tensor<3x4xf32>
  %0 = mgb.matrix_mul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %1 = mgb.elemwise sqrt %0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %1 : tensor<2x4xf32>
}

// CHECK:       kernel.def @matmul_gemm_avx2_m2_n4_k3_bconst_f32_bias_res_RELU = "matmul_gemm" ["avx2"] {{.*}}bias = 1 : i64, residual = 1 : i64, act = "relu"
// CHECK:       func.func @dense
// CHECK-NEXT:    %[[W:.*]] = kernel.weight #mgb.weight<"25e5f9d51057ff0a"> : tensor<3x4xf32>
// CHECK-NEXT:    %[[B:.*]] = kernel.weight #mgb.weight<"611dff8219a7ada5"> : tensor<4xf32>
// CHECK-NEXT:    %[[OUT:.*]] = kernel.call @matmul_gemm_avx2_m2_n4_k3_bconst_f32_bias_res_RELU(%x, %[[W]], %[[B]], %r)
// CHECK-NEXT:    func.return %[[OUT]]

// PARTIAL:       func.func @sqrt_after
// PARTIAL:         %[[MM:.*]] = kernel.call @matmul_gemm_avx2_m2_n4_k3_bconst_f32(%x, %{{.*}})
// PARTIAL-NEXT:    %[[SQ:.*]] = kernel.call @elemwise_sqrt_8_s1_f32(%[[MM]])
// PARTIAL-NEXT:    func.return %[[SQ]]
