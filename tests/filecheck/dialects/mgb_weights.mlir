// Weights print elided (digest only) unless asked for in full; full weights round-trip byte for byte.
// RUN: xmge-opt %s --print-weights | xmge-opt --print-weights | filecheck %s --check-prefix=FULL
// RUN: xmge-opt %s | filecheck %s --check-prefix=ELIDED
// RUN: xmge-opt %s | xmge-opt --print-weights | filecheck %s --check-prefix=ELIDED

func.func @w() -> tensor<2x3xf32> {
  %w = mgb.const #mgb.weight<"c6b5d45f06894866", "0x000000000000803f0000004000004040000080400000a040"> {name = "fc.weight"} : tensor<2x3xf32>
  func.return %w : tensor<2x3xf32>
}
// FULL:   %w = mgb.const #mgb.weight<"c6b5d45f06894866", "0x000000000000803f0000004000004040000080400000a040"> {name = "fc.weight"} : tensor<2x3xf32>
// ELIDED: %w = mgb.const #mgb.weight<"c6b5d45f06894866"> {name = "fc.weight"} : tensor<2x3xf32>
