// f16-io-f32-comp (enable_io16xc32) and f16-io-comp (enable_ioc16): float16 inside, float32 at the edges.
// RUN: xmge-opt %s -p f16-io-f32-comp | filecheck %s --check-prefixes=CHECK,F32COMP
// RUN: xmge-opt %s -p f16-io-comp | filecheck %s --check-prefixes=CHECK,F16COMP

func.func @net(%x: tensor<1x3x6x6xf32>, %n: tensor<1x4xi32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>, tensor<1x4xf32>, tensor<1x4x1x1xi1>) {
  %w = mgb.const #mgb.weight<"740b0ba1753caad0", "0xb81e053eb81e05be0ad7233fcdcccc3d713d0abfec51b83e6666a63f3333733f333333bf5c8fa2bf52b81ebf0ad7233db81e15c0ae4761be0000a0bf48e13abf713d0abf0ad7a3be85ebd13eb81e853fb81e05be295caf3f1f852bbf3333b33e6666663fec51b83da4703dbf1f856bbf1f85ebbeae47613eae4781bf3d0a57be0ad723be713d0a3f3d0a573eec51b83e666626bfb81e05be14ae473f52b8be3fae47a1bfae47c13fcdccac3f14ae473fb81e853e52b89ebe48e1ba3f48e1fa3f6666e63fc3f5a83fec51b83e48e19abf00000080c3f5283fb81ea5bfcdcccc3ef628dc3e3333333f3d0a97bfc3f528bfae47e1be8fc295bf52b8de3f000000bfc3f5a83eb81e85be713dca3fc3f5a83fae47213fcdcc0cc0cdcc4c3d7b142e3f0000803f52b81ebfc3f5e83fc3f5a8bfc3f528bfd7a3703fcdcc4c3d000000405c8f423eae4721bf5c8fc2be1f858bbf0ad7a3bfae47213fe17a143fb81ea53f000040bfec51d83fe17a94bec3f5c83ff628dcbea4703dbf0000803e0ad7833f0ad7233e3d0a17bf1f85abbf3333b3bf0000003fa4707d3f0ad723bec3f588bf52b85e3f0ad7a3bf8fc235bf52b81e3f"> {name = "conv.weight"} : tensor<4x3x3x3xf32>
  %b = mgb.const #mgb.weight<"803c859c7e7ffe3d", "0x000010c014aec73ee17a14bfae47e13d"> : tensor<1x4x1x1xf32>
  %0 = mgb.convolution %x, %w : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = mgb.elemwise fuse_add_relu %0, %b : (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %2 = mgb.reduce sum %1 {axis = 3 : i64} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x1xf32>
  %3 = mgb.reduce max %2 {axis = 2 : i64} : (tensor<1x4x4x1xf32>) -> tensor<1x4x1x1xf32>
  %4 = mgb.typecvt %n : (tensor<1x4xi32>) -> tensor<1x4xf32>
  %5 = mgb.elemwise lt %3, %b : (tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x1x1xi1>
  %6 = mgb.elemwise mul %4, %4 : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
  func.return %1, %3, %6, %5 : tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>, tensor<1x4xf32>, tensor<1x4x1x1xi1>
}

// CHECK-LABEL:  func.func @net(%x: tensor<1x3x6x6xf32>, %n: tensor<1x4xi32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>, tensor<1x4xf32>, tensor<1x4x1x1xi1>)
// CHECK-NEXT:     %[[X:.*]] = mgb.typecvt %x : (tensor<1x3x6x6xf32>) -> tensor<1x3x6x6xf16>
// CHECK-NEXT:     %w = mgb.const #mgb.weight<"{{[0-9a-f]+}}"> {name = "conv.weight"} : tensor<4x3x3x3xf16>
// CHECK-NEXT:     %b = mgb.const {{.*}} : tensor<1x4x1x1xf16>
// F32COMP-NEXT:   %[[C:.*]] = mgb.convolution %[[X]], %w {compute_mode = #mgb<compute_mode float32>} : {{.*}} -> tensor<1x4x4x4xf16>
// F16COMP-NEXT:   %[[C:.*]] = mgb.convolution %[[X]], %w : {{.*}} -> tensor<1x4x4x4xf16>
// CHECK-NEXT:     %[[R:.*]] = mgb.elemwise fuse_add_relu %[[C]], %b : {{.*}} -> tensor<1x4x4x4xf16>
// F32COMP-NEXT:   mgb.reduce sum %[[R]] {axis = 3 : i64, data_type = #mgb<reduce_data_type float_o16xc32>} : {{.*}} -> tensor<1x4x4x1xf16>
// F16COMP-NEXT:   mgb.reduce sum %[[R]] {axis = 3 : i64} : {{.*}} -> tensor<1x4x4x1xf16>
// CHECK-NEXT:     %[[M:.*]] = mgb.reduce max
// A conversion to float32 inside the graph becomes one to float16.
// CHECK-NEXT:     %[[N:.*]] = mgb.typecvt %n : (tensor<1x4xi32>) -> tensor<1x4xf16>
// CHECK-NEXT:     %[[LT:.*]] = mgb.elemwise lt %[[M]], %b : (tensor<1x4x1x1xf16>, tensor<1x4x1x1xf16>) -> tensor<1x4x1x1xi1>
// CHECK-NEXT:     %[[P:.*]] = mgb.elemwise mul %[[N]], %[[N]] : {{.*}} -> tensor<1x4xf16>
// Float outputs are converted back to float32; the bool output is untouched.
// CHECK-NEXT:     %[[O1:.*]] = mgb.typecvt %[[R]] : (tensor<1x4x4x4xf16>) -> tensor<1x4x4x4xf32>
// CHECK-NEXT:     %[[O2:.*]] = mgb.typecvt %[[M]] : (tensor<1x4x1x1xf16>) -> tensor<1x4x1x1xf32>
// CHECK-NEXT:     %[[O3:.*]] = mgb.typecvt %[[P]] : (tensor<1x4xf16>) -> tensor<1x4xf32>
// CHECK-NEXT:     func.return %[[O1]], %[[O2]], %[[O3]], %[[LT]]

// MegEngine keeps LayerNorm's mean and rstd float32 (only the normalised output follows the input);
// a float16 value meeting the kept float32 mean reads it converted to float16, an op on the kept
// float32 values alone stays float32, argmax stays int32, and a transposed convolution accumulates
// in float32 with F32COMP.
func.func @stats(%x: tensor<2x8xf32>, %d: tensor<1x2x3x3xf32>) -> (tensor<2x8xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2x1xi32>, tensor<1x1x5x5xf32>) {
  %w = mgb.const #mgb.weight<"be406c5ef9029a1e", "0x0000003f9a99193f3333333fcdcc4c3f6666663f0000803fcdcc8c3f9a99993f"> : tensor<8xf32>
  %b = mgb.const #mgb.weight<"b15d62718517a80d", "0x9a9999becdcc4cbecdccccbd00000000cdcccc3dcdcc4c3e9a99993ecdcccc3e"> : tensor<8xf32>
  %k = mgb.const #mgb.weight<"431611d7b1d69584", "0x00000040000080bf"> : tensor<2xf32>
  %y, %m, %r = mgb.layer_norm %x, %w, %b {normalized_size = 8 : i64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2xf32>, tensor<2xf32>)
  %s = mgb.elemwise mul %m, %k : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %t = mgb.elemwise relu %r : (tensor<2xf32>) -> tensor<2xf32>
  %a = mgb.argmax %y {axis = 1 : i64} : (tensor<2x8xf32>) -> tensor<2x1xi32>
  %f = mgb.reshape %w : (tensor<8xf32>) -> tensor<2x1x2x2xf32>
  %u = mgb.convolution_backward_data %f, %d : (tensor<2x1x2x2xf32>, tensor<1x2x3x3xf32>) -> tensor<1x1x4x4xf32>
  %v = mgb.padding %u {front = array<i64: 0, 0, 1, 1>, back = array<i64: 0, 0, 0, 0>} : (tensor<1x1x4x4xf32>) -> tensor<1x1x5x5xf32>
  func.return %y, %s, %t, %a, %v : tensor<2x8xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2x1xi32>, tensor<1x1x5x5xf32>
}

// CHECK-LABEL:  func.func @stats
// CHECK:          %[[Y:.*]], %[[M:.*]], %[[R:.*]] = mgb.layer_norm {{.*}} : (tensor<2x8xf16>, tensor<8xf16>, tensor<8xf16>) -> (tensor<2x8xf16>, tensor<2xf32>, tensor<2xf32>)
// CHECK-NEXT:     %[[M16:.*]] = mgb.typecvt %[[M]] : (tensor<2xf32>) -> tensor<2xf16>
// CHECK-NEXT:     %[[S:.*]] = mgb.elemwise mul %[[M16]], %k : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xf16>
// CHECK-NEXT:     %[[T:.*]] = mgb.elemwise relu %[[R]] : (tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:     %[[A:.*]] = mgb.argmax %[[Y]] {axis = 1 : i64} : (tensor<2x8xf16>) -> tensor<2x1xi32>
// CHECK-NEXT:     %[[F:.*]] = mgb.reshape %w : (tensor<8xf16>) -> tensor<2x1x2x2xf16>
// F32COMP-NEXT:   %[[U:.*]] = mgb.convolution_backward_data %[[F]], %{{.*}} {compute_mode = #mgb<compute_mode float32>} : {{.*}} -> tensor<1x1x4x4xf16>
// F16COMP-NEXT:   %[[U:.*]] = mgb.convolution_backward_data %[[F]], %{{.*}} : {{.*}} -> tensor<1x1x4x4xf16>
// CHECK-NEXT:     %[[V:.*]] = mgb.padding %[[U]] {{.*}} -> tensor<1x1x5x5xf16>
// Only the float16 results are converted back; the kept float32 ones are returned as they are.
// CHECK-NEXT:     %[[O1:.*]] = mgb.typecvt %[[Y]] : (tensor<2x8xf16>) -> tensor<2x8xf32>
// CHECK-NEXT:     %[[O2:.*]] = mgb.typecvt %[[S]] : (tensor<2xf16>) -> tensor<2xf32>
// CHECK-NEXT:     %[[O5:.*]] = mgb.typecvt %[[V]] : (tensor<1x1x5x5xf16>) -> tensor<1x1x5x5xf32>
// CHECK-NEXT:     func.return %[[O1]], %[[O2]], %[[T]], %[[A]], %[[O5]]
