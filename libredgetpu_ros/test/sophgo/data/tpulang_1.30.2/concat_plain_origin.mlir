#loc = loc(unknown)
module @concat_plain attributes {module.chip = "ALL", module.platform = "TPULANG", module.state = "TOP_QUANTIZED", module.top_run_mode = "STATIC", module.weight_file = "concat_plain_top_quantized_all_origin_weight.npz"} {
  func.func @main(%arg0: tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02>> loc(unknown), %arg1: tensor<1x1x2x3x!quant.uniform<i8:f32, 2.000000e-01:3>> loc(unknown)) -> tensor<*xsi8> {
    %0 = "top.None"() : () -> none loc(#loc)
    %1 = "top.Input"(%arg0) {do_preprocess = false} : (tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02>>) -> tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02>> loc(#loc1)
    %2 = "top.Input"(%arg1) {do_preprocess = false} : (tensor<1x1x2x3x!quant.uniform<i8:f32, 2.000000e-01:3>>) -> tensor<1x1x2x3x!quant.uniform<i8:f32, 2.000000e-01:3>> loc(#loc2)
    %3 = "top.Concat"(%1, %2) {axis = 1 : si32, do_relu = false, only_merge = false, relu_limit = -1.000000e+00 : f64, round_mode = "HalfAwayFromZero"} : (tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02>>, tensor<1x1x2x3x!quant.uniform<i8:f32, 2.000000e-01:3>>) -> tensor<*xsi8> loc(#loc3)
    return %3 : tensor<*xsi8> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc1 = loc("a")
#loc2 = loc("b")
#loc3 = loc("cat")
