// mgb-dce erases unused side-effect-free ops, whole dead chains at once, unused constants included.
// RUN: xmge-opt %s -p mgb-dce | filecheck %s
// RUN: xmge-opt %s -p "mgb-dce{consts=false}" | filecheck %s --check-prefix=KEEP
// RUN: xmge-opt %s -p mgb-dce --print-weights | filecheck %s --check-prefix=WEIGHTS

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %used = mgb.const #mgb.weight<"[[DIGEST:[0-9a-f]+]]"> : tensor<2xf32>
// CHECK-NEXT:    %0 = mgb.elemwise add %x, %used : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    func.return %0 : tensor<2xf32>
// CHECK-NEXT:  }
// KEEP-LABEL: func.func @main
// KEEP-NEXT:    %unused = mgb.const
// KEEP-NEXT:    %used = mgb.const
// KEEP-NEXT:    mgb.elemwise add %x, %used
// KEEP-NEXT:    func.return
// WEIGHTS: %used = mgb.const #mgb.weight<"c86e535c30403d76", "0x0000803f00000040"> : tensor<2xf32>
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %unused = mgb.const #mgb.weight<"c86e535c30403d76", "0x0000803f00000040"> : tensor<2xf32>
  %used = mgb.const #mgb.weight<"c86e535c30403d76", "0x0000803f00000040"> : tensor<2xf32>
  %0 = mgb.elemwise add %x, %used : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = mgb.elemwise mul %0, %unused : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %2 = mgb.elemwise relu %1 : (tensor<2xf32>) -> tensor<2xf32>
  %3 = mgb.reduce sum %2 {axis = 0 : i64} : (tensor<2xf32>) -> tensor<1xf32>
  func.return %0 : tensor<2xf32>
}
