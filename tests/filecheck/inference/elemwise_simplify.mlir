// elemwise-simplify: MegEngine's opt_level-1 simplifications of traced graphs.
// RUN: xmge-opt %s -p elemwise-simplify --print-weights | filecheck %s

func.func @log_exp(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = mgb.elemwise exp %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = mgb.elemwise log %0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}

func.func @log_sum_exp(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>) -> (tensor<2x3xf32>, tensor<1x3xf32>) {
  %0 = mgb.elemwise exp %a : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = mgb.elemwise exp %b : (tensor<1x3xf32>) -> tensor<1x3xf32>
  %2 = mgb.elemwise add %0, %1 : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>
  %3 = mgb.elemwise log %2 {name = "lse"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %3, %1 : tensor<2x3xf32>, tensor<1x3xf32>
}

func.func @div_self(%x: tensor<2xf32>, %y: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0 = mgb.elemwise mul %x, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = mgb.elemwise true_div %0, %0 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %2 = mgb.elemwise true_div %x, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %1, %2 : tensor<2xf32>, tensor<2xf32>
}

func.func @ints_untouched(%x: tensor<2xi32>) -> tensor<2xi32> {
  %0 = mgb.elemwise true_div %x, %x : (tensor<2xi32>, tensor<2xi32>) -> tensor<2xi32>
  func.return %0 : tensor<2xi32>
}

// CHECK-LABEL: func.func @log_exp
// CHECK-NEXT:    func.return %x

// The fused op keeps the log's name; exp(b) stays because it is also returned.
// CHECK-LABEL: func.func @log_sum_exp
// CHECK-NOT:     mgb.elemwise log
// CHECK:         %[[E:.*]] = mgb.elemwise exp %b
// CHECK:         %[[L:.*]] = mgb.elemwise log_sum_exp %a, %b {name = "lse"}
// CHECK-NEXT:    func.return %[[L]], %[[E]]

// CHECK-LABEL: func.func @div_self
// CHECK:         %[[ONE:.*]] = mgb.const #mgb.weight<"{{[0-9a-f]+}}", "0x0000803f0000803f"> : tensor<2xf32>
// CHECK:         %[[D:.*]] = mgb.elemwise true_div %x, %y
// CHECK-NEXT:    func.return %[[ONE]], %[[D]]

// CHECK-LABEL: func.func @ints_untouched
// CHECK-NEXT:    mgb.elemwise true_div %x, %x
