// Malformed mgb syntax is a parse error that says what was expected.
// RUN: xmge-opt %s --split-input-file --parsing-diagnostics | filecheck %s

func.func @bad_digest() -> tensor<2xf32> {
  %0 = mgb.const #mgb.weight<"0000000000000000", "0x0000803f00000040"> : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
// CHECK: mgb_parse_errors.mlir:5:70
// CHECK: weight data does not match its digest 0000000000000000

// -----
func.func @bad_hex() -> tensor<2xf32> {
  %0 = mgb.const #mgb.weight<"0000000000000000", "0xzz"> : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
// CHECK: weight data is not valid hex

// -----
func.func @not_a_weight() -> tensor<2xf32> {
  %0 = mgb.const dense<1.0> : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
// CHECK: mgb_parse_errors.mlir:20:18
// CHECK: mgb.const expects a #mgb.weight<...> value

// -----
func.func @bad_mode(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mgb.elemwise frobnicate %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
// CHECK: mgb_parse_errors.mlir:28:21
// CHECK: Expected `relu`, `abs`, {{.*}}`sign`
