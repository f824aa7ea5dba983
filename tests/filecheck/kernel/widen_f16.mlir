// kernel-widen-f16: a float16 op that no unit on the target computes in float16 runs in float32
// between typecvts (each result rounded to float16, as MegEngine's float16 graphs do); a target with
// float16 units (ARMv8.2 FP16) keeps it.
// RUN: xmge-opt %s -p 'kernel-widen-f16{target=x86-avx2}' | filecheck %s
// RUN: xmge-opt %s -p 'kernel-widen-f16{target=arm-fp16}' | filecheck %s --check-prefix=FP16

func.func @main(%x: tensor<2x3xf16>, %y: tensor<2x3xf16>) -> tensor<2x3xf16> {
  %0 = mgb.elemwise mul %x, %y : (tensor<2x3xf16>, tensor<2x3xf16>) -> tensor<2x3xf16>
  %1 = mgb.elemwise relu %0 : (tensor<2x3xf16>) -> tensor<2x3xf16>
  func.return %1 : tensor<2x3xf16>
}

// CHECK:       %[[X:.*]] = mgb.typecvt %x : (tensor<2x3xf16>) -> tensor<2x3xf32>
// CHECK-NEXT:  %[[Y:.*]] = mgb.typecvt %y : (tensor<2x3xf16>) -> tensor<2x3xf32>
// CHECK-NEXT:  %[[M:.*]] = mgb.elemwise mul %[[X]], %[[Y]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %[[MH:.*]] = mgb.typecvt %[[M]] : (tensor<2x3xf32>) -> tensor<2x3xf16>
// CHECK-NEXT:  %[[MF:.*]] = mgb.typecvt %[[MH]] : (tensor<2x3xf16>) -> tensor<2x3xf32>
// CHECK-NEXT:  %[[R:.*]] = mgb.elemwise relu %[[MF]] : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:  %[[RH:.*]] = mgb.typecvt %[[R]] : (tensor<2x3xf32>) -> tensor<2x3xf16>
// CHECK-NEXT:  func.return %[[RH]] : tensor<2x3xf16>

// FP16:        %0 = mgb.elemwise mul %x, %y : (tensor<2x3xf16>, tensor<2x3xf16>) -> tensor<2x3xf16>
// FP16-NEXT:   %1 = mgb.elemwise relu %0 : (tensor<2x3xf16>) -> tensor<2x3xf16>
// FP16-NOT:    typecvt
