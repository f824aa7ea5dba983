// param-fuse: ops whose operands are all constants are evaluated (reference kernels) and become constants,
// whole parameter sub-graphs at once; max-growth keeps folds that would add too many bytes.
// RUN: xmge-opt %s -p param-fuse --print-weights | filecheck %s
// RUN: xmge-opt %s -p "param-fuse{max-growth=64}" | filecheck %s --check-prefix=LIMIT

func.func @subgraph(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %a = mgb.const #mgb.weight<"6d50bdacee372b0e", "0x0000803f0000004000004040"> : tensor<1x3xf32>
  %b = mgb.const #mgb.weight<"9453643fcfc87574", "0x000020410000a0410000f041"> : tensor<1x3xf32>
  %0 = mgb.elemwise add %a, %b : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<1x3xf32>
  %1 = mgb.reshape %0 : (tensor<1x3xf32>) -> tensor<3xf32>
  %2 = mgb.elemwise mul %x, %1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  func.return %2 : tensor<2x3xf32>
}

func.func @broadcast(%x: tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32> {
  %one = mgb.const #mgb.weight<"4f3ec3409f0d3777", "0x00000040"> : tensor<1xf32>
  %0 = mgb.broadcast %one : (tensor<1xf32>) -> tensor<1x8x8x8xf32>
  %1 = mgb.elemwise add %x, %0 : (tensor<1x8x8x8xf32>, tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  func.return %1 : tensor<1x8x8x8xf32>
}

// add + reshape of constants fold into one constant [11, 22, 33] (float32 little-endian bytes).
// CHECK-LABEL: func.func @subgraph
// CHECK-NEXT:    %[[K:.*]] = mgb.const #mgb.weight<"{{[0-9a-f]+}}", "0x000030410000b04100000442"> : tensor<3xf32>
// CHECK-NEXT:    mgb.elemwise mul %x, %[[K]]
// CHECK-NEXT:    func.return

// CHECK-LABEL: func.func @broadcast
// CHECK-NEXT:    %[[K:.*]] = mgb.const {{.*}} : tensor<1x8x8x8xf32>
// CHECK-NEXT:    mgb.elemwise add %x, %[[K]]

// LIMIT-LABEL: func.func @subgraph
// LIMIT-NEXT:    mgb.const {{.*}} : tensor<3xf32>
// LIMIT-LABEL: func.func @broadcast
// LIMIT-NEXT:    %one = mgb.const
// LIMIT-NEXT:    mgb.broadcast %one
