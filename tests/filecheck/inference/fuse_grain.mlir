// fuse-grain: sum/size folds into MEAN, reshape+reduce global pooling into AdaptivePooling;
// split-reduce-squeeze: multi-axis reduce+squeeze interleaved as MegEngine's frontend emits it.
// RUN: xmge-opt %s -p fuse-grain | filecheck %s
// RUN: xmge-opt %s -p split-reduce-squeeze | filecheck %s --check-prefix=SPLIT

func.func @mean(%x: tensor<2x4x3xf32>) -> (tensor<2x1x3xf32>, tensor<2x1x3xf32>) {
  %four = mgb.const #mgb.weight<"98c003dc410a73fe", "0x00008040"> : tensor<1xf32>
  %five = mgb.const #mgb.weight<"3bb2a08b9388bdbf", "0x0000a040"> : tensor<1xf32>
  %0 = mgb.reduce sum %x {axis = 1 : i64} : (tensor<2x4x3xf32>) -> tensor<2x1x3xf32>
  %1 = mgb.elemwise true_div %0, %four {scope = "m"} : (tensor<2x1x3xf32>, tensor<1xf32>) -> tensor<2x1x3xf32>
  %2 = mgb.reduce sum %x {axis = 1 : i64} : (tensor<2x4x3xf32>) -> tensor<2x1x3xf32>
  %3 = mgb.elemwise true_div %2, %five : (tensor<2x1x3xf32>, tensor<1xf32>) -> tensor<2x1x3xf32>
  func.return %1, %3 : tensor<2x1x3xf32>, tensor<2x1x3xf32>
}

func.func @global_pool(%x: tensor<1x2x3x4xf32>) -> tensor<1x2x1x1xf32> {
  %0 = mgb.reshape %x : (tensor<1x2x3x4xf32>) -> tensor<1x2x12xf32>
  %1 = mgb.reduce max %0 {axis = 2 : i64} : (tensor<1x2x12xf32>) -> tensor<1x2x1xf32>
  %2 = mgb.axis_add_remove %1 {methods = [#mgb<axis_method add_1>], axes = array<i64: 3>, scope = "pool"} : (tensor<1x2x1xf32>) -> tensor<1x2x1x1xf32>
  func.return %2 : tensor<1x2x1x1xf32>
}

func.func @mean_hw(%x: tensor<1x3x4x5xf32>) -> tensor<1x3xf32> {
  %0 = mgb.reduce mean %x {axis = 3 : i64} : (tensor<1x3x4x5xf32>) -> tensor<1x3x4x1xf32>
  %1 = mgb.reduce mean %0 {axis = 2 : i64} : (tensor<1x3x4x1xf32>) -> tensor<1x3x1x1xf32>
  %2 = mgb.axis_add_remove %1 {methods = [#mgb<axis_method remove>, #mgb<axis_method remove>], axes = array<i64: 3, 2>, name = "m"} : (tensor<1x3x1x1xf32>) -> tensor<1x3xf32>
  func.return %2 : tensor<1x3xf32>
}

// CHECK-LABEL: func.func @mean
// CHECK:         %[[M:.*]] = mgb.reduce mean %x {axis = 1 : i64, scope = "m"} : (tensor<2x4x3xf32>) -> tensor<2x1x3xf32>
// 5 is not the size of axis 1: no mean.
// CHECK-NEXT:    %[[S:.*]] = mgb.reduce sum %x
// CHECK-NEXT:    %[[D:.*]] = mgb.elemwise true_div %[[S]], %five
// CHECK-NEXT:    func.return %[[M]], %[[D]]
// CHECK-LABEL: func.func @global_pool
// CHECK-NEXT:    %[[P:.*]] = mgb.adaptive_pooling max %x {out_shape = array<i64: 1, 1>, scope = "pool"} : (tensor<1x2x3x4xf32>) -> tensor<1x2x1x1xf32>
// CHECK-NEXT:    func.return %[[P]]

// SPLIT-LABEL: func.func @mean_hw
// SPLIT-NEXT:    %[[A:.*]] = mgb.reduce mean %x {axis = 3 : i64}
// SPLIT-NEXT:    %[[B:.*]] = mgb.axis_add_remove %[[A]] {methods = [#mgb<axis_method remove>], axes = array<i64: 3>}
// SPLIT-NEXT:    %[[C:.*]] = mgb.reduce mean %[[B]] {axis = 2 : i64} : (tensor<1x3x4xf32>) -> tensor<1x3x1xf32>
// SPLIT-NEXT:    %[[D:.*]] = mgb.axis_add_remove %[[C]] {methods = [#mgb<axis_method remove>], axes = array<i64: 2>, name = "m"}
// SPLIT-NEXT:    func.return %[[D]]
