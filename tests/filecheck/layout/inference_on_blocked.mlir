// The inference passes on a graph that is already blocked (a layout .mge from MegEngine, read and
// optimized again by compile()): constants they rebuild keep the layout of the values they meet.
// RUN: xmge-opt %s -p reorder-arith-chain --print-weights | filecheck %s --check-prefix=REORDER
// RUN: xmge-opt %s -p f16-io-f32-comp | filecheck %s --check-prefix=F16

// MegEngine writes the bias first: the constants move last and are summed in nchw44, the
// scalar broadcasting over the blocks.
// REORDER-LABEL: func.func @residual_bias_first
// REORDER-NEXT:    %[[S:.*]] = mgb.elemwise add %x, %y : (tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>, tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>
// REORDER-NEXT:    %[[K:.*]] = mgb.const #mgb.weight<"{{[0-9a-f]+}}", "0x0000c03f0000204000006040000090400000b0400000d0400000f04000000841"> : tensor<1x2x1x1x4xf32, #layout.fmt<nchw44>>
// REORDER-NEXT:    %{{.*}} = mgb.elemwise add %[[S]], %[[K]] {name = "blk.ADD"} : (tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>, tensor<1x2x1x1x4xf32, #layout.fmt<nchw44>>) -> tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>
// REORDER-NEXT:    func.return

// F16-LABEL: func.func @residual_bias_first
// F16:         mgb.const {{.*}} : tensor<1x2x1x1x4xf16, #layout.fmt<nchw44>>
// F16:         mgb.const {{.*}} : tensor<1xf16>
func.func @residual_bias_first(%x: tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>, %y: tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>> {
  %b = mgb.const #mgb.weight<"748783c1b55b90b1", "0x0000803f0000004000004040000080400000a0400000c0400000e04000000041"> : tensor<1x2x1x1x4xf32, #layout.fmt<nchw44>>
  %h = mgb.const #mgb.weight<"b3a124678a998092", "0x0000003f"> : tensor<1xf32>
  %0 = mgb.elemwise add %b, %y : (tensor<1x2x1x1x4xf32, #layout.fmt<nchw44>>, tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>
  %1 = mgb.elemwise add %x, %0 : (tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>, tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>
  %2 = mgb.elemwise add %h, %1 {name = "blk.ADD"} : (tensor<1xf32>, tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>) -> tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>
  func.return %2 : tensor<1x2x2x2x4xf32, #layout.fmt<nchw44>>
}
