// kernel-select: every mgb op becomes a kernel.call of the highest-priority family with a unit on the
// target's ISAs (xmge-opt --list-kernels); constants become kernel.weight. The matrix product takes
// the target's widest GEMM unit, the elementwise ops the portable C one.
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2}' | filecheck %s --check-prefix=AVX2
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx512}' | filecheck %s --check-prefix=AVX512
// RUN: xmge-opt %s -p 'kernel-select{target=arm}' | filecheck %s --check-prefix=NEON
// RUN: xmge-opt %s -p 'kernel-select{target=cuda}' | filecheck %s --check-prefix=CUDA

func.func @dense(%x: tensor<2x3xf32>, %r: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %w = mgb.const #mgb.weight<"25e5f9d51057ff0a", "0xcdcccc3dcdccccbd9a99193fcdcccc3d000000bfcdcccc3e6666a63f6666663f333333bf6666a6bf9a9919bf00000000"> : tensor<3x4xf32>
  %0 = mgb.matrix_mul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %b = mgb.const #mgb.weight<"611dff8219a7ada5", "0x333313c0cdcc4cbe9a9999bf333333bf"> : tensor<4xf32>
  %1 = mgb.elemwise add %0, %b : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = mgb.elemwise add %1, %r : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %3 = mgb.elemwise relu %2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %3 : tensor<2x4xf32>
}

// AVX2-DAG:   kernel.def @elemwise_relu_8_s1_f32 = "elemwise" ["generic"] {mode = "relu"
// AVX2-DAG:   kernel.def @elemwise_add_2x4_s4x1_s0x1_f32 = "elemwise" ["generic"]
// AVX2-DAG:   kernel.def @matmul_gemm_avx2_m2_n4_k3_bconst_f32 = "matmul_gemm" ["avx2"] {{.*}}bias = 0 : i64, residual = 0 : i64, act = "identity"
// AVX2:       func.func @dense
// AVX2-NEXT:    %[[W:.*]] = kernel.weight #mgb.weight<"25e5f9d51057ff0a"> : tensor<3x4xf32>
// AVX2-NEXT:    %[[MM:.*]] = kernel.call @matmul_gemm_avx2_m2_n4_k3_bconst_f32(%x, %[[W]])
// AVX2-NEXT:    %[[B:.*]] = kernel.weight #mgb.weight<"611dff8219a7ada5"> : tensor<4xf32>
// AVX2-NEXT:    %[[BIAS:.*]] = kernel.call @elemwise_add_2x4_s4x1_s0x1_f32(%[[MM]], %[[B]])
// AVX2-NEXT:    %[[RES:.*]] = kernel.call @elemwise_add_8_s1_s1_f32(%[[BIAS]], %r)
// AVX2-NEXT:    %[[ACT:.*]] = kernel.call @elemwise_relu_8_s1_f32(%[[RES]])
// AVX2-NEXT:    func.return %[[ACT]]
// AVX2-NOT: = mgb.

// AVX512:     kernel.def @matmul_gemm_avx512_m2_n4_k3_bconst_f32 = "matmul_gemm" ["avx512"]
// AVX512-NOT: = mgb.
// NEON:       kernel.def @matmul_gemm_neon_m2_n4_k3_bconst_f32 = "matmul_gemm" ["neon"]
// NEON-NOT: = mgb.
// CUDA:       kernel.def @matmul_cuda_b1_m2_n4_k3_bconst_f32 = "matmul_gemm" ["generic"]
// CUDA-NOT: = mgb.
