#loc = loc(unknown)
module @softmax_of_relu attributes {module.chip = "ALL", module.platform = "TPULANG", module.state = "TOP_QUANTIZED", module.top_run_mode = "STATIC", module.weight_file = "softmax_of_relu_top_quantized_all_origin_weight.npz"} {
  func.func @main(%arg0: tensor<2x5xf32> loc(unknown)) -> tensor<2x5xf32> {
    %0 = "top.None"() : () -> none loc(#loc)
    %1 = "top.Input"(%arg0) {do_preprocess = false} : (tensor<2x5xf32>) -> tensor<2x5xf32> loc(#loc1)
    %2 = "top.Relu"(%1) {relu_limit = -1.000000e+00 : f64} : (tensor<2x5xf32>) -> tensor<2x5xf32> loc(#loc2)
    %3 = "top.Softmax"(%2) {axis = 1 : si32, beta = 1.000000e+00 : f64, log = false, round_mode = "HalfAwayFromZero"} : (tensor<2x5xf32>) -> tensor<2x5xf32> loc(#loc3)
    return %3 : tensor<2x5xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc1 = loc("x")
#loc2 = loc("r")
#loc3 = loc("y")
