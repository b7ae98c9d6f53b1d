#loc = loc(unknown)
module @requant_of_input attributes {module.chip = "ALL", module.platform = "TPULANG", module.state = "TOP_QUANTIZED", module.top_run_mode = "STATIC", module.weight_file = "requant_of_input_top_quantized_all_origin_weight.npz"} {
  func.func @main(%arg0: tensor<1x4xsi32> loc(unknown)) -> tensor<1x4xf32> {
    %0 = "top.None"() : () -> none loc(#loc)
    %1 = "top.Input"(%arg0) {do_preprocess = false} : (tensor<1x4xsi32>) -> tensor<1x4xsi32> loc(#loc1)
    %2 = "top.RequantInt"(%1) {fuse_rq = false, multiplier = [3], quant_mode = "MultiplierShift", round_mode = "HalfAwayFromZero", rq_axis = 1 : si32, rshift = [1]} : (tensor<1x4xsi32>) -> tensor<1x4x!quant.uniform<i8:f32, 2.500000e-01:5>> loc(#loc2)
    %3 = "top.Cast"(%2) {round_mode = "HalfAwayFromZero", to = ""} : (tensor<1x4x!quant.uniform<i8:f32, 2.500000e-01:5>>) -> tensor<1x4xf32> loc(#loc3)
    return %3 : tensor<1x4xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc1 = loc("x")
#loc2 = loc("q")
#loc3 = loc("y")
