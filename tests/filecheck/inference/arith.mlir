// arith-simplify, reorder-arith-chain and arith-fuse.
// RUN: xmge-opt %s -p arith-simplify | filecheck %s --check-prefix=SIMPLIFY
// RUN: xmge-opt %s -p reorder-arith-chain --print-weights | filecheck %s --check-prefix=REORDER
// RUN: xmge-opt %s -p arith-fuse | filecheck %s --check-prefix=FUSE

func.func @identities(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x2x3xf32>) {
  %zero = mgb.const #mgb.weight<"ef6eb604187a17fa", "0x000000000000000000000000"> : tensor<1x3xf32>
  %one = mgb.const #mgb.weight<"7b54265d12bf1ccd", "0x0000803f"> : tensor<1xf32>
  %zeros3 = mgb.const #mgb.weight<"6417e2a002851674", "0x000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"> : tensor<2x2x3xf32>
  %0 = mgb.elemwise add %zero, %x : (tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = mgb.elemwise mul %x, %one : (tensor<2x3xf32>, tensor<1xf32>) -> tensor<2x3xf32>
  %2 = mgb.elemwise true_div %x, %one : (tensor<2x3xf32>, tensor<1xf32>) -> tensor<2x3xf32>
  %3 = mgb.elemwise sub %x, %zero : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  %4 = mgb.elemwise negate %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = mgb.elemwise negate %4 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = mgb.elemwise add %x, %zeros3 : (tensor<2x3xf32>, tensor<2x2x3xf32>) -> tensor<2x2x3xf32>
  func.return %0, %1, %2, %3, %5, %6 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x2x3xf32>
}

func.func @chain(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %c1 = mgb.const #mgb.weight<"6d50bdacee372b0e", "0x0000803f0000004000004040"> : tensor<1x3xf32>
  %c2 = mgb.const #mgb.weight<"9453643fcfc87574", "0x000020410000a0410000f041"> : tensor<1x3xf32>
  %0 = mgb.elemwise add %c2, %y : (tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = mgb.elemwise add %x, %0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = mgb.elemwise add %c1, %1 {scope = "blk"} : (tensor<1x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %2 : tensor<2x3xf32>
}

func.func @canonical_chain(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %c = mgb.const #mgb.weight<"6d50bdacee372b0e", "0x0000803f0000004000004040"> : tensor<1x3xf32>
  %0 = mgb.elemwise add %x, %y : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = mgb.elemwise add %0, %c : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}

func.func @fuse(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %c: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = mgb.elemwise add %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = mgb.elemwise relu %0 {scope = "act"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = mgb.elemwise mul %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = mgb.elemwise add %c, %2 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %4 = mgb.elemwise add %b, %c : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %5 = mgb.elemwise sigmoid %4 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %6 = mgb.elemwise add %a, %c : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %7 = mgb.elemwise tanh %6 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %1, %3, %5, %6 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// SIMPLIFY-LABEL: func.func @identities
// A zero that broadcasts x to a larger shape is not an identity.
// SIMPLIFY:       %[[B:.*]] = mgb.elemwise add %x, %zeros3
// SIMPLIFY-NEXT:  func.return %x, %x, %x, %x, %x, %[[B]]

// Constants of an ADD chain go to the end as one sum: c1 + (x + (c2 + y)) = (x + y) + [11, 22, 33].
// REORDER-LABEL: func.func @chain
// REORDER-NEXT:    %[[S:.*]] = mgb.elemwise add %x, %y
// REORDER-NEXT:    %[[K:.*]] = mgb.const #mgb.weight<"{{[0-9a-f]+}}", "0x000030410000b04100000442"> : tensor<1x3xf32>
// REORDER-NEXT:    mgb.elemwise add %[[S]], %[[K]] {scope = "blk"}
// REORDER-NEXT:    func.return
// Already in that form: unchanged.
// REORDER-LABEL: func.func @canonical_chain
// REORDER-NEXT:    %c = mgb.const
// REORDER-NEXT:    %0 = mgb.elemwise add %x, %y
// REORDER-NEXT:    %1 = mgb.elemwise add %0, %c
// REORDER-NEXT:    func.return %1

// FUSE-LABEL: func.func @fuse
// FUSE-NEXT:    %0 = mgb.elemwise fuse_add_relu %a, %b {scope = "act"}
// FUSE-NEXT:    %1 = mgb.elemwise fuse_mul_add3 %a, %b, %c
// FUSE-NEXT:    %2 = mgb.elemwise fuse_add_sigmoid %b, %c
// The ADD is also returned, so it stays.
// FUSE-NEXT:    %3 = mgb.elemwise add %a, %c
// FUSE-NEXT:    func.return %0, %1, %2, %3

// On quantized values the ADD and RELU stay apart: MegEngine refuses to load an Elemwise with a
// fused mode on quantized inputs.
func.func @quantized_add_relu(%a: tensor<1x4x!mgb.quant<qint32, 0.01>>, %b: tensor<1x4x!mgb.quant<qint32, 0.01>>) -> tensor<1x4x!mgb.quant<qint32, 0.01>> {
  %0 = mgb.elemwise add %a, %b : (tensor<1x4x!mgb.quant<qint32, 0.01>>, tensor<1x4x!mgb.quant<qint32, 0.01>>) -> tensor<1x4x!mgb.quant<qint32, 0.01>>
  %1 = mgb.elemwise relu %0 : (tensor<1x4x!mgb.quant<qint32, 0.01>>) -> tensor<1x4x!mgb.quant<qint32, 0.01>>
  func.return %1 : tensor<1x4x!mgb.quant<qint32, 0.01>>
}
// FUSE-LABEL: func.func @quantized_add_relu
// FUSE-NEXT:    %0 = mgb.elemwise add %a, %b
// FUSE-NEXT:    %1 = mgb.elemwise relu %0
// FUSE-NEXT:    func.return %1

// A named parameter that happens to be zero (a freshly initialised bias) is not an identity: the ADD
// stays, as MegEngine keeps it.
func.func @zero_parameter(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %b = mgb.const #mgb.weight<"ef6eb604187a17fa", "0x000000000000000000000000"> {name = "fc.bias"} : tensor<1x3xf32>
  %0 = mgb.elemwise add %x, %b : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
// SIMPLIFY-LABEL: func.func @zero_parameter
// SIMPLIFY-NEXT:    %b = mgb.const
// SIMPLIFY-NEXT:    %0 = mgb.elemwise add %x, %b
// SIMPLIFY-NEXT:    func.return %0
