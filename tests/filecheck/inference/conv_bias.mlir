// fuse-conv-bias-nonlinearity and fuse-conv-bias-with-z (spec B.4.1, B.4.2).
// RUN: xmge-opt %s -p fuse-conv-bias-nonlinearity | filecheck %s
// RUN: xmge-opt %s -p fuse-conv-bias-nonlinearity,fuse-conv-bias-with-z | filecheck %s --check-prefix=Z

func.func @bias_relu(%x: tensor<1x3x6x6xf32>) -> tensor<1x4x4x4xf32> {
  %w = mgb.const #mgb.weight<"740b0ba1753caad0", "0xb81e053eb81e05be0ad7233fcdcccc3d713d0abfec51b83e6666a63f3333733f333333bf5c8fa2bf52b81ebf0ad7233db81e15c0ae4761be0000a0bf48e13abf713d0abf0ad7a3be85ebd13eb81e853fb81e05be295caf3f1f852bbf3333b33e6666663fec51b83da4703dbf1f856bbf1f85ebbeae47613eae4781bf3d0a57be0ad723be713d0a3f3d0a573eec51b83e666626bfb81e05be14ae473f52b8be3fae47a1bfae47c13fcdccac3f14ae473fb81e853e52b89ebe48e1ba3f48e1fa3f6666e63fc3f5a83fec51b83e48e19abf00000080c3f5283fb81ea5bfcdcccc3ef628dc3e3333333f3d0a97bfc3f528bfae47e1be8fc295bf52b8de3f000000bfc3f5a83eb81e85be713dca3fc3f5a83fae47213fcdcc0cc0cdcc4c3d7b142e3f0000803f52b81ebfc3f5e83fc3f5a8bfc3f528bfd7a3703fcdcc4c3d000000405c8f423eae4721bf5c8fc2be1f858bbf0ad7a3bfae47213fe17a143fb81ea53f000040bfec51d83fe17a94bec3f5c83ff628dcbea4703dbf0000803e0ad7833f0ad7233e3d0a17bf1f85abbf3333b3bf0000003fa4707d3f0ad723bec3f588bf52b85e3f0ad7a3bf8fc235bf52b81e3f"> : tensor<4x3x3x3xf32>
  %b = mgb.const #mgb.weight<"803c859c7e7ffe3d", "0x000010c014aec73ee17a14bfae47e13d"> : tensor<1x4x1x1xf32>
  %0 = mgb.convolution %x, %w {scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = mgb.elemwise fuse_add_relu %b, %0 {scope = "act"} : (tensor<1x4x1x1xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %1 : tensor<1x4x4x4xf32>
}

func.func @bias_then_sigmoid(%x: tensor<1x3x6x6xf32>) -> tensor<1x4x4x4xf32> {
  %w = mgb.const #mgb.weight<"384c6de5a2c57fc2", "0x0ad7a3bdcdcc4c3ed7a3303f5c8f42bf8fc2b53f48e13a3f3d0a573fe17a943f713d4a3f3d0a573f0ad7a33d3d0ab7bf295c0fbeb81e45bf8fc2b5bfb81e853e85eb11bf0ad783bfb81e85bf713d8a3eec51b83ec3f5a83f0ad723bcb81e853f3333b33f3333933f14ae17c0a4709d3f7b14ae3e3d0ad73ea470bd3e5c8fc23e0ad7a33eec51b8be3333f3bfae47e1bdcdcc4cbf713d8a3fe17a94be0ad7a33d9a9959bf5c8f02bf0ad723bc52b8bebf9a99993eae47e1bdec5198bf9a9919c05c8f023f9a9999be14ae07bf8fc275bec3f5e83fcdcc4cbdec51b83d52b8bebf3333d33f1f856b3fc3f5883fcdcc4c3d1f856b3fa470bd3ef6281c3f9a9919bef628bcbf0ad7833f3d0af7bf8fc275becdcc4cbeb81e85bff6281c3fcdcc4cbeae47e1beb81e053f8fc2f5be85ebb13f3333b33ed7a3f0beec51f8bf14aea7bf1f858b3fcdcc4cbd295c8fbe85ebd13f0ad7a3bf3d0a17bfd7a3f0be3d0a173fc3f528bff6281cbf7b14cebf48e13a3f295c4f3f8fc2f5be0ad7233eb81ea5bfd7a3f0bed7a3b03f295c0f3e0ad71340713d4abfe17a143fcdcc4cbe85eb113f0ad723bc295c0fbf52b85ebfe17a4440"> : tensor<4x3x3x3xf32>
  %b = mgb.const #mgb.weight<"1643ae065a433971", "0x0ad7a3bdae4701c0666626bf7b142e3f"> : tensor<1x4x1x1xf32>
  %0 = mgb.convolution %x, %w {scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = mgb.elemwise add %0, %b : (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %2 = mgb.elemwise sigmoid %1 : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %2 : tensor<1x4x4x4xf32>
}

func.func @relu_only(%x: tensor<1x3x6x6xf32>) -> tensor<1x4x4x4xf32> {
  %w = mgb.const #mgb.weight<"dc3c2498764a52ff", "0x000000bf7b14ae3f0000803f9a9919bed7a3f0be000080bf333333bff628bcbf9a99993f1f85cb3fae47a1bf3d0a97bf5c8fe2bf8fc275bf3d0a47c085eb91bf6666a63f3333b3be9a99593f48e1fabeae47e13fcdcc4c3e5c8fc2be333323400ad7a3bef6289cbfcdcc4c3e0ad723bdc3f5883f1f856bbfcdcc4c3f9a99593f1f852bbf0ad7233ee17a54bf66661640333333bf6666e6bec3f588bf3333b3be0ad723bcb81e453ff6281cbf5c8f42be8fc2b5bfe17a54bfd7a33040b81e853f14ae47bf1f85abbf48e17abf0ad7a3bc8fc2f53ca4703dbfb81ea5bf8fc2b53f6666e63ea470bdbeae4761be14ae07bff6283cc08fc2f53dc3f588bf000080bf0ad723bf48e13a3f8fc295bf3d0ab7bf0ad7233f0000403f8fc275bf295c0f3fe17a94be9a99993eae47a1bfe17a543f9a99993f0ad7233f295c0f3fae4771c0b81e853e8fc2f5bc9a9919beae4721bf8fc2753d85ebd13eb81e85be1f85ebbea4709d3f7b148ebf0ad7833fec51383ecdcc4cbfe17a94be1f856bbf7b142e3f3333b33e295c0fbfcdcc8cbf9a99993e8fc2753fae47e1bd3d0ad73e5c8fc2be295c8f3de17a94bee17a943eae47c1bf"> : tensor<4x3x3x3xf32>
  %0 = mgb.convolution %x, %w {scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = mgb.elemwise relu %0 : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %1 : tensor<1x4x4x4xf32>
}

func.func @residual(%x: tensor<1x3x6x6xf32>, %r: tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %w = mgb.const #mgb.weight<"654854a23831c411", "0x0ad7233f1f856bbeec51b83e7b14aebe0ad7a33ec3f588bfec51983f9a99d9bfb81e85bf8fc2753e48e1ba3f295c8f3e000080be3d0ab7bf5c8f42be0ad7a3bcec51d83f52b81e3f0ad7c3bf85eb0140cdccccbeae4761bff628bc3fcdcc4cbda470bdbeae47613e3d0a573fa4707d3fd7a3b0bf000000403333733f5c8fc2be85eb51bfec5178bf8fc2f53d666626bf5c8f42bf295c4f3fec51b83e14aec7be48e13a3f295caf3f1f858bbf9a9919bfd7a3703fec51383f1f856b3ee17a943f1f858bbfa470bdbf52b85ebf8fc2f53dcdcc4cbf48e1fabe48e17abf52b81ebf000080bfa470bd3e713d4a3f8fc2f5be3d0a57bee17a14bf14ae073fec51b83d1f85cb3fcdcc8cbfec51b83eae47e13eec51b8bee17a143fec51b8bf14ae07401f85abbf1f856b3f295c8fbf3333933f5c8fc2be0ad7233ecdcc4c3dcdcc8c3f0ad7a3be7b143ec05c8f42bfec51383eae47e1beb81e453f5c8f823f9a9919be52b8bebfd7a3b03f713d8a3f9a9999be3d0a07403333b3be85eb91bf0ad723be713d8a3fd7a370bf9a99f93f666666bf3333733f713d0a3f9a9919be713d8a3f0000c0bf7b14ae3f8fc275bd713d0abf"> : tensor<4x3x3x3xf32>
  %full = mgb.const #mgb.weight<"edf8933a08102198", "0x0000403f14ae873fb81e453f00000040713d8a3f0ad7a33f713d0abfae47e13d295c0f3f0ad7a3bc9a99993ef628dc3e3d0a573fcdccccbd3333b3bee17a54bf0ad763bf8fc2953f0ad7a3bd713d4a3f6666a6bfec51f8bf666686bf3333933fc3f5883fc3f5a83ecdcc4cbfb81e05be9a9999be7b14aebed7a320c0f6285cbf5c8f42be5c8fc23f0ad7233e3333b33f14aec7be000080be9a9979c01f85eb3ecdcc0c3fae47e13f48e1fabeec51b83d8fc235bf3d0a97bf8fc235bf7b14aebe7b14ae3f00000000713d4abf295c0f3eae47613e7b142ebf85eb913f85ebf1bf3d0a57be1f852b3f1f85abbfec51b83eb81ea53f6666e63eec51d8bf48e13abf"> : tensor<1x4x4x4xf32>
  %0 = mgb.convolution %x, %w {scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = mgb.elemwise add %r, %0 : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %2 = mgb.convolution %x, %w {scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %3 = mgb.elemwise add %2, %full : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %4 = mgb.elemwise add %1, %3 : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %4 : tensor<1x4x4x4xf32>
}

func.func @conv_read_twice(%x: tensor<1x3x6x6xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) {
  %w = mgb.const #mgb.weight<"487756da8665d90d", "0xa4709d3f9a99993e0ad723bcae47e13eec51383f8fc235bfe17a94be295c0f3e713d0abfb81e05be6666a63fec5178bf3d0af73fd7a3f03f48e1dabf295c0fbe7b14ae3e5c8f42bfa4703dbf8fc275bea4703d3f5c8f02bf713dea3fe17a943ecdccccbd9a99b93fae47213fa470bd3ec3f5a8be14aee73f295c4f3fcdcc4cbe713dcabfa470bd3e85eb91bff628dcbf295c8fbe295c8f3e0ad7a33f295c8f3e295c4f3fa4709dbf0ad7a3bc8fc2f53df6285c3f8fc2f53dcdcc4c3f000000bfec51b83e85ebd13e0000a0bfec51383e0ad7a3be3333f3bf8fc2753fec51b8be9a9959bf5c8fc2be295c0f3eae47c13f7b142ebed7a3f03e295caf3f14ae073fc3f5883f8fc2f5beb81e453f8fc275bdc3f5883f000080bf14ae47bf5c8fa23fcdcc4cbeec51b8be0ad7a33dd7a330bf713daa3f0000a0bf9a9919be3333b33ecdccccbdcdcc4cbf52b85ebff628dc3e0ad783bf6666263f5c8fc2bfcdcc0cbf0ad7233d0000a0bf6666263f0ad7a3bcb81e85bf5c8fc2bfc3f5c8bfcdcc4c3de17a94bf7b14aebf1f856bbe85eb1140295c8f3e5c8f423f3d0a573e14ae473f1f85abbff628dcbeb81e853e0ad7a3bc"> : tensor<4x3x3x3xf32>
  %0 = mgb.convolution %x, %w {scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = mgb.elemwise relu %0 : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %0, %1 : tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>
}

func.func @with_z(%x: tensor<1x3x6x6xf32>, %z: tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %w = mgb.const #mgb.weight<"8280d09b6e2b531e", "0x5c8f42be1f852bbfb81e85beb81e45bf48e11ac0ec5198bf8fc2f53e14aec73f14aee73fcdcccc3d0ad7633fc3f5683fd7a330bf9a99d9bf8fc2f53cae47e1bf0ad7a3bef6281c3f8fc2b5bf8fc2f53c52b89e3fec51b83eb81e053fc3f5683fa470dd3f9a99193ea4709d3f8fc275bdcdcc0cbf52b89e3ef6281cbf85eb11bff6281cbf333313c0ae47e13dae47a1bfae47e1bd9a99b93fb81e05bf713d0abf7b14ae3fcdcc0c3f48e17a3fec51b8be0000403fd7a330bf7b142ebf9a99193f9a9919bfb81e453fc3f51840ec51d8bf000040bf295c8f3f9a9919bee17a943fae4781bfc3f5a83e9a9919be295c0f3ec3f5a83ef6289cbfc3f588bf3333b33fe17a943eae47e13d0ad723bdec51b83ee17a94bf000080bf6666a63f9a99193e9a99593ff6281cbfd7a3b03f3333b33e8fc2f53ecdcc0c3fcdcc4cbf295cefbfc3f588bfd7a3d03f6666a63f3333b3be9a9999beb81e853f7b142ebe6666a6bf5c8fa23f8fc2f53eae4721c052b89ebe295c0f3e8fc2f53e9a99193e0ad723bf8fc2f5bde17a943e713d8abea470bdbe0000a03f333373bf3333b3be85eb01c0713d0a3fe17a543fcdcc0c3f1f856b3f"> : tensor<4x3x3x3xf32>
  %b = mgb.const #mgb.weight<"d2b7d3ceb4402570", "0xae47e13e7b14ae3ed7a3f03e713d8abe"> : tensor<1x4x1x1xf32>
  %0 = mgb.convolution %x, %w {scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %1 = mgb.elemwise add %0, %b : (tensor<1x4x4x4xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %2 = mgb.elemwise fuse_add_relu %z, %1 : (tensor<1x4x4x4xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  func.return %2 : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @bias_relu
// CHECK:         %[[Y:.*]] = mgb.conv_bias %x, %w, %b {nonline_mode = #mgb<nonline relu>, scope = "act"}
// CHECK-NEXT:    func.return %[[Y]]
// CHECK-LABEL: func.func @bias_then_sigmoid
// CHECK:         %[[Y:.*]] = mgb.conv_bias %x, %w, %b {nonline_mode = #mgb<nonline sigmoid>, scope = "conv"}
// CHECK-NEXT:    func.return %[[Y]]
// CHECK-LABEL: func.func @relu_only
// CHECK:         mgb.conv_bias %x, %w {nonline_mode = #mgb<nonline relu>, scope = "conv"} : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
// A non-constant of the output's shape is a valid ("residual") bias; a full-shaped constant is not.
// CHECK-LABEL: func.func @residual
// CHECK:         mgb.conv_bias %x, %w, %r {scope = "conv"}
// CHECK-NEXT:    %[[C:.*]] = mgb.convolution %x, %w
// CHECK-NEXT:    mgb.elemwise add %[[C]], %full
// CHECK-LABEL: func.func @conv_read_twice
// CHECK:         mgb.convolution
// CHECK-NEXT:    mgb.elemwise relu
// CHECK-LABEL: func.func @with_z
// CHECK:         %[[Y:.*]] = mgb.conv_bias %x, %w, %b {scope = "conv"}
// CHECK-NEXT:    mgb.elemwise fuse_add_relu %z, %[[Y]]

// Z-LABEL: func.func @residual
// Z:         mgb.conv_bias %x, %w, %r {scope = "conv"}
// Z-LABEL: func.func @with_z
// Z:         %[[Y:.*]] = mgb.conv_bias %x, %w, %b, %z {nonline_mode = #mgb<nonline relu>, scope = "conv"}
// Z-NEXT:    func.return %[[Y]]
