// kernel-pack-weights: a constant operand of a kernel that reads it in a packed order (the GEMM's
// right-hand panels of 16 columns on AVX2) is stored packed ahead of time, with the packing named on
// the weight and a new digest; the kernel.def is unchanged.
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2},kernel-pack-weights{target=x86-avx2}' | filecheck %s
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2}' | filecheck %s --check-prefix=UNPACKED

func.func @dense(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %w = mgb.const #mgb.weight<"25e5f9d51057ff0a", "0xcdcccc3dcdccccbd9a99193fcdcccc3d000000bfcdcccc3e6666a63f6666663f333333bf6666a6bf9a9919bf00000000"> : tensor<3x4xf32>
  %0 = mgb.matrix_mul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}

// CHECK:       kernel.def @matmul_gemm_avx2_m2_n4_k3_bconst_f32 = "matmul_gemm" ["avx2"]
// CHECK:       %[[W:.*]] = kernel.weight #mgb.weight<"{{[0-9a-f]+}}"> {packing = "gemm_b16"} : tensor<1x3x16xf32>
// CHECK-NOT:     25e5f9d51057ff0a
// CHECK-NEXT:  %[[OUT:.*]] = kernel.call @matmul_gemm_avx2_m2_n4_k3_bconst_f32(%x, %[[W]]) : (tensor<2x3xf32>, tensor<1x3x16xf32>) -> tensor<2x4xf32>

// UNPACKED:    kernel.weight #mgb.weight<"25e5f9d51057ff0a"> : tensor<3x4xf32>
// UNPACKED-NOT: packing
