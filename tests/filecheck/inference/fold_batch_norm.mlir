// fold-batch-norm: BatchNorm after a single-use conv scales the conv's weights and leaves a channel ADD;
// elsewhere (no conv, or a conv read twice) it becomes FUSE_MUL_ADD3(x, k, c).
// RUN: xmge-opt %s -p fold-batch-norm | filecheck %s
// RUN: xmge-opt %s -p fold-batch-norm --print-weights | xmge-opt -p fold-batch-norm | filecheck %s --check-prefix=IDEMPOTENT

func.func @conv_bn(%x: tensor<1x3x6x6xf32>) -> tensor<1x4x6x6xf32> {
  %w = mgb.const #mgb.weight<"740b0ba1753caad0", "0xb81e053eb81e05be0ad7233fcdcccc3d713d0abfec51b83e6666a63f3333733f333333bf5c8fa2bf52b81ebf0ad7233db81e15c0ae4761be0000a0bf48e13abf713d0abf0ad7a3be85ebd13eb81e853fb81e05be295caf3f1f852bbf3333b33e6666663fec51b83da4703dbf1f856bbf1f85ebbeae47613eae4781bf3d0a57be0ad723be713d0a3f3d0a573eec51b83e666626bfb81e05be14ae473f52b8be3fae47a1bfae47c13fcdccac3f14ae473fb81e853e52b89ebe48e1ba3f48e1fa3f6666e63fc3f5a83fec51b83e48e19abf00000080c3f5283fb81ea5bfcdcccc3ef628dc3e3333333f3d0a97bfc3f528bfae47e1be8fc295bf52b8de3f000000bfc3f5a83eb81e85be713dca3fc3f5a83fae47213fcdcc0cc0cdcc4c3d7b142e3f0000803f52b81ebfc3f5e83fc3f5a8bfc3f528bfd7a3703fcdcc4c3d000000405c8f423eae4721bf5c8fc2be1f858bbf0ad7a3bfae47213fe17a143fb81ea53f000040bfec51d83fe17a94bec3f5c83ff628dcbea4703dbf0000803e0ad7833f0ad7233e3d0a17bf1f85abbf3333b3bf0000003fa4707d3f0ad723bec3f588bf52b85e3f0ad7a3bf8fc235bf52b81e3f"> {name = "conv.weight"} : tensor<4x3x3x3xf32>
  %0 = mgb.convolution %x, %w {padding = array<i64: 1, 1>, scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
  %s = mgb.const #mgb.weight<"76110a14ac51a939", "0x7b148e3f14ae073ff6289c3fb81e053f"> : tensor<1x4x1x1xf32>
  %b = mgb.const #mgb.weight<"eee49a376928b396", "0x0ad7a3bdcdcc4c3ed7a3303f5c8f42bf"> : tensor<1x4x1x1xf32>
  %m = mgb.const #mgb.weight<"d5e4e996ece9c376", "0x8fc2b53f48e13a3f3d0a573fe17a943f"> : tensor<1x4x1x1xf32>
  %v = mgb.const #mgb.weight<"2d367af569cdee4d", "0xf628bc3f14ae873f5c8f423fa4703d3f"> : tensor<1x4x1x1xf32>
  %1 = mgb.batch_norm %0, %s, %b, %m, %v {epsilon = 1.000000e-03 : f64, scope = "bn"} : (tensor<1x4x6x6xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x6x6xf32>
  func.return %1 : tensor<1x4x6x6xf32>
}

func.func @group_conv_bn(%x: tensor<1x2x5x5xf32>) -> tensor<1x4x3x3xf32> {
  %w = mgb.const #mgb.weight<"b72ec49161be95d1", "0x295c0fbeb81e45bf8fc2b5bfb81e853e85eb11bf0ad783bfb81e85bf713d8a3eec51b83ec3f5a83f0ad723bcb81e853f3333b33f3333933f14ae17c0a4709d3f7b14ae3e3d0ad73ea470bd3e5c8fc23e0ad7a33eec51b8be3333f3bfae47e1bdcdcc4cbf713d8a3fe17a94be0ad7a33d9a9959bf5c8f02bf0ad723bc52b8bebf9a99993eae47e1bdec5198bf9a9919c0"> : tensor<2x2x1x3x3xf32>
  %0 = mgb.convolution %x, %w {sparse = #mgb<sparse group>} : (tensor<1x2x5x5xf32>, tensor<2x2x1x3x3xf32>) -> tensor<1x4x3x3xf32>
  %s = mgb.const #mgb.weight<"eb64182c4b8af340", "0xa470bd3f0ad7a33f295c4f3fb81e453f"> : tensor<1x4x1x1xf32>
  %b = mgb.const #mgb.weight<"5c73636fac25bbb6", "0xc3f5e83fcdcc4cbdec51b83d52b8bebf"> : tensor<1x4x1x1xf32>
  %m = mgb.const #mgb.weight<"1af2e9d33d2afd92", "0x3333d33f1f856b3fc3f5883fcdcc4c3d"> : tensor<1x4x1x1xf32>
  %v = mgb.const #mgb.weight<"f88659475cf9af0b", "0x14aea73f8fc2953f48e1ba3f3d0ab73f"> : tensor<1x4x1x1xf32>
  %1 = mgb.batch_norm %0, %s, %b, %m, %v : (tensor<1x4x3x3xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  func.return %1 : tensor<1x4x3x3xf32>
}

func.func @bn_alone(%x: tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32> {
  %s = mgb.const #mgb.weight<"b5d764dffc258cb6", "0x0000a03f7b14ae3f0000403f0ad7233f"> : tensor<1x4x1x1xf32>
  %b = mgb.const #mgb.weight<"b078aca2533e0619", "0xcdcc4cbeb81e85bff6281c3fcdcc4cbe"> : tensor<1x4x1x1xf32>
  %m = mgb.const #mgb.weight<"d9e36483d1992258", "0xae47e1beb81e053f8fc2f5be85ebb13f"> : tensor<1x4x1x1xf32>
  %v = mgb.const #mgb.weight<"72ed3bfed8366b9e", "0x0ad7833f5c8f823f3d0a173fa470bd3f"> : tensor<1x4x1x1xf32>
  %0 = mgb.batch_norm %x, %s, %b, %m, %v {scope = "bn"} : (tensor<2x4x3x3xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) -> tensor<2x4x3x3xf32>
  func.return %0 : tensor<2x4x3x3xf32>
}

func.func @conv_read_twice(%x: tensor<1x3x6x6xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) {
  %w = mgb.const #mgb.weight<"69e3559d0ffc9b8b", "0x1f858b3fcdcc4cbd295c8fbe85ebd13f0ad7a3bf3d0a17bfd7a3f0be3d0a173fc3f528bff6281cbf7b14cebf48e13a3f295c4f3f8fc2f5be0ad7233eb81ea5bfd7a3f0bed7a3b03f295c0f3e0ad71340713d4abfe17a143fcdcc4cbe85eb113f0ad723bc295c0fbf52b85ebfe17a44400ad7a3bdae4701c0666626bf7b142e3f000000bf7b14ae3f0000803f9a9919bed7a3f0be000080bf333333bff628bcbf9a99993f1f85cb3fae47a1bf3d0a97bf5c8fe2bf8fc275bf3d0a47c085eb91bf6666a63f3333b3be9a99593f48e1fabeae47e13fcdcc4c3e5c8fc2be333323400ad7a3bef6289cbfcdcc4c3e0ad723bdc3f5883f1f856bbfcdcc4c3f9a99593f1f852bbf0ad7233ee17a54bf66661640333333bf6666e6bec3f588bf3333b3be0ad723bcb81e453ff6281cbf5c8f42be8fc2b5bfe17a54bfd7a33040b81e853f14ae47bf1f85abbf48e17abf0ad7a3bc8fc2f53ca4703dbfb81ea5bf8fc2b53f6666e63ea470bdbeae4761be14ae07bff6283cc08fc2f53dc3f588bf000080bf0ad723bf48e13a3f8fc295bf3d0ab7bf0ad7233f0000403f8fc275bf295c0f3fe17a94be9a99993eae47a1bfe17a543f"> : tensor<4x3x3x3xf32>
  %0 = mgb.convolution %x, %w : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %s = mgb.const #mgb.weight<"23b96b8c3597a262", "0x713daa3f0ad7833f14aea73f0000c03f"> : tensor<1x4x1x1xf32>
  %b = mgb.const #mgb.weight<"6380f0f903e7b31b", "0xae4701c06666e63eb81e853e8fc2f5bc"> : tensor<1x4x1x1xf32>
  %m = mgb.const #mgb.weight<"8dd32c626e70e4b5", "0x9a9919beae4721bf8fc2753d85ebd13e"> : tensor<1x4x1x1xf32>
  %v = mgb.const #mgb.weight<"b042c0e25a138092", "0x14ae473fd7a3303f7b14ae3f14ae873f"> : tensor<1x4x1x1xf32>
  %1 = mgb.batch_norm %0, %s, %b, %m, %v : (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  func.return %0, %1 : tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @conv_bn
// CHECK-NEXT:    %[[W:.*]] = mgb.const #mgb.weight<"{{[0-9a-f]+}}"> : tensor<4x3x3x3xf32>
// CHECK-NEXT:    %[[C:.*]] = mgb.convolution %x, %[[W]] {padding = array<i64: 1, 1>, scope = "conv"}
// CHECK-NEXT:    %[[B:.*]] = mgb.const #mgb.weight<"{{[0-9a-f]+}}"> : tensor<1x4x1x1xf32>
// CHECK-NEXT:    %[[Y:.*]] = mgb.elemwise add %[[C]], %[[B]] {scope = "bn"}
// CHECK-NEXT:    func.return %[[Y]]

// Group weights (G, OC/G, IC/G, FH, FW) are scaled per output channel too.
// CHECK-LABEL: func.func @group_conv_bn
// CHECK-NEXT:    mgb.const {{.*}} : tensor<2x2x1x3x3xf32>
// CHECK-NEXT:    mgb.convolution %x, %{{.*}} {sparse = #mgb<sparse group>}
// CHECK-NEXT:    mgb.const {{.*}} : tensor<1x4x1x1xf32>
// CHECK-NEXT:    mgb.elemwise add
// CHECK-NOT:     mgb.batch_norm

// CHECK-LABEL: func.func @bn_alone
// CHECK-NEXT:    %[[K:.*]] = mgb.const {{.*}} : tensor<1x4x1x1xf32>
// CHECK-NEXT:    %[[C:.*]] = mgb.const {{.*}} : tensor<1x4x1x1xf32>
// CHECK-NEXT:    mgb.elemwise fuse_mul_add3 %x, %[[K]], %[[C]] {scope = "bn"}

// The conv output is also returned, so its weights stay and the BN becomes FUSE_MUL_ADD3.
// CHECK-LABEL: func.func @conv_read_twice
// CHECK-NEXT:    %w = mgb.const
// CHECK-NEXT:    %[[C:.*]] = mgb.convolution %x, %w
// CHECK:         mgb.elemwise fuse_mul_add3 %[[C]]

// IDEMPOTENT-NOT: mgb.batch_norm
// IDEMPOTENT-COUNT-2: mgb.elemwise add
// IDEMPOTENT-COUNT-2: mgb.elemwise fuse_mul_add3
