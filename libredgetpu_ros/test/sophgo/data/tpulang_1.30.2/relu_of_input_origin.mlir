#loc = loc(unknown)
module @relu_of_input attributes {module.chip = "ALL", module.platform = "TPULANG", module.state = "TOP_QUANTIZED", module.top_run_mode = "STATIC", module.weight_file = "relu_of_input_top_quantized_all_origin_weight.npz"} {
  func.func @main(%arg0: tensor<1x2x3x3xf32> loc(unknown)) -> tensor<1x2x3x3xf32> {
    %0 = "top.None"() : () -> none loc(#loc)
    %1 = "top.Input"(%arg0) {do_preprocess = false} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> loc(#loc1)
    %2 = "top.Relu"(%1) {relu_limit = -1.000000e+00 : f64} : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32> loc(#loc2)
    return %2 : tensor<1x2x3x3xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc1 = loc("x")
#loc2 = loc("y")
