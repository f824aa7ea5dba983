// kernel-plan-memory: every kernel result gets a static place (an offset in the arena, or the output
// buffer for what the function returns), the function a kernel.plan of the arena's and the weights'
// sizes; an intermediate whose reader runs in place shares nothing with the inputs.
// RUN: xmge-opt %s -p 'kernel-select{target=x86-avx2},kernel-plan-memory{target=x86-avx2}' | filecheck %s

func.func @chain(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = mgb.elemwise mul %x, %y : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = mgb.elemwise relu %0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}

// CHECK:       func.func @chain({{.*}}) -> tensor<2x3xf32> attributes {kernel.plan = #kernel.plan<arena = 64, workspace = 0, weights = 0, threads = 1>} {
// CHECK-NEXT:    %[[M:.*]] = kernel.call @elemwise_mul_6_s1_s1_f32(%x, %y) {places = [#kernel.place<arena, 0>]}
// CHECK-NEXT:    %[[R:.*]] = kernel.call @elemwise_relu_6_s1_f32(%[[M]]) {places = [#kernel.place<output, 0>]}
// CHECK-NEXT:    func.return %[[R]]
