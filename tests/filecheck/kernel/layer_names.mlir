// A kernel call keeps the model's name of the operator it computes (the mgb op's `name`, else its
// `scope`), for profiles; a call with an epilogue fused in keeps its producer's name; a call lowering
// adds has none.
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2},kernel-fuse-epilogue{target=x86-avx2}' | filecheck %s

func.func @named(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  %w = mgb.const #mgb.weight<"25e5f9d51057ff0a", "0xcdcccc3dcdccccbd9a99193fcdcccc3d000000bfcdcccc3e6666a63f6666663f333333bf6666a6bf9a9919bf00000000"> {name = "fc.weight"} : tensor<3x4xf32>
  %0 = mgb.matrix_mul %x, %w {name = "fc.MatrixMul", scope = "fc"} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %1 = mgb.elemwise relu %0 {name = "act.RELU"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = mgb.elemwise sqrt %1 {scope = "head"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %2 : tensor<2x4xf32>
}

// CHECK:       func.func @named
// CHECK-NEXT:    %[[W:.*]] = kernel.weight #mgb.weight<"25e5f9d51057ff0a"> {name = "fc.weight"}
// CHECK-NEXT:    %[[MM:.*]] = kernel.call @matmul_gemm_avx2_m2_n4_k3_bconst_f32_RELU(%x, %[[W]]) {name = "fc.MatrixMul", scope = "fc"}
// CHECK-NEXT:    %[[SQ:.*]] = kernel.call @elemwise_sqrt_8_s1_f32(%[[MM]]) {scope = "head"}
// CHECK-NEXT:    func.return %[[SQ]]
