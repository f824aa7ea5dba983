// relayout-back: a graph in a layout the target has no kernels for (here NHWCD4, an OpenCL layout,
// on a target that keeps only nchw88) computes in NCHW: blocked operands are relayouted to plain,
// filters fold into plain constants, and back-to-back relayout pairs cancel, so only the edges of
// the blocked region keep a relayout. A layout in `keep` is left alone.
// RUN: xmge-opt %S/float_layouts.mlir -p "enable-hwcd4,relayout-back{keep=nchw88}" | filecheck %s
// RUN: xmge-opt %S/float_layouts.mlir -p "enable-hwcd4,relayout-back{keep=nhwcd4}" | filecheck %s --check-prefix=KEEP

// The 1-channel input was padded to 4 channels by enable-hwcd4: the pair stays (it pads), the
// convolution runs in NCHW on the zero-padded channels with a zero-padded plain filter.
// CHECK-LABEL: func.func @hybrid_first_layer
// CHECK-NEXT:    %0 = layout.relayout %x {channels = 1 : i64} : tensor<1x1x8x8xf32> -> tensor<1x8x1x8x4xf32, #layout.fmt<nhwcd4>>
// CHECK-NEXT:    %1 = layout.relayout %0 : tensor<1x8x1x8x4xf32, #layout.fmt<nhwcd4>> -> tensor<1x4x8x8xf32>
// CHECK-NOT:     nhwcd4
// CHECK:         mgb.conv_bias %1, %{{[0-9]+}}, %{{[0-9]+}} {padding = array<i64: 1, 1>, nonline_mode = #mgb<nonline relu>} : (tensor<1x4x8x8xf32>, tensor<8x4x3x3xf32>, tensor<1x8x1x1xf32>) -> tensor<1x8x8x8xf32>
// CHECK-NEXT:    mgb.pooling max %{{[0-9]+}} {window = array<i64: 2, 2>, stride = array<i64: 2, 2>} : (tensor<1x8x8x8xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NOT:     layout.relayout
// CHECK:         func.return
// A dense graph whose channels divide by 4 has no relayout left at all.
// CHECK-LABEL: func.func @dense
// CHECK-NOT:     layout.relayout
// CHECK:         mgb.conv_bias %x, {{.*}} -> tensor<1x8x8x8xf32>
// CHECK-NOT:     layout.relayout
// CHECK:         func.return
// CHECK-LABEL: func.func @group
// CHECK-NOT:     nhwcd4
// CHECK:         mgb.conv_bias %x, {{.*}}sparse = #mgb<sparse group>{{.*}} -> tensor<1x8x6x6xf32>
// CHECK-NOT:     nhwcd4
// CHECK:         func.return

// KEEP-LABEL: func.func @hybrid_first_layer
// KEEP:         mgb.conv_bias %0, {{.*}}format = #mgb<format nhwcd4>
// KEEP:         mgb.pooling max {{.*}}format = #mgb<format nhwcd4>
