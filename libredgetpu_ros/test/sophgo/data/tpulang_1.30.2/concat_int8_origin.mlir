#loc = loc(unknown)
"builtin.module"() <{sym_name = "concat_int8"}> ({
  "func.func"() <{function_type = (tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02:-9>>, tensor<1x1x2x3x!quant.uniform<i8:f32, 8.300000e-02:-10>>) -> tensor<*x!quant.uniform<i8:f32, 7.110000e-02:-7>>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02:-9>> loc(unknown), %arg1: tensor<1x1x2x3x!quant.uniform<i8:f32, 8.300000e-02:-10>> loc(unknown)):
    %0 = "top.None"() : () -> none loc(#loc)
    %1 = "top.Input"(%arg0) {do_preprocess = false} : (tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02:-9>>) -> tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02:-9>> loc(#loc1)
    %2 = "top.Input"(%arg1) {do_preprocess = false} : (tensor<1x1x2x3x!quant.uniform<i8:f32, 8.300000e-02:-10>>) -> tensor<1x1x2x3x!quant.uniform<i8:f32, 8.300000e-02:-10>> loc(#loc2)
    %3 = "top.Concat"(%1, %2) {axis = 1 : si32, do_relu = false, only_merge = false, relu_limit = -1.000000e+00 : f64, round_mode = "HalfAwayFromZero"} : (tensor<1x2x2x3x!quant.uniform<i8:f32, 5.000000e-02:-9>>, tensor<1x1x2x3x!quant.uniform<i8:f32, 8.300000e-02:-10>>) -> tensor<*x!quant.uniform<i8:f32, 7.110000e-02:-7>> loc(#loc3)
    "func.return"(%3) : (tensor<*x!quant.uniform<i8:f32, 7.110000e-02:-7>>) -> () loc(#loc)
  }) : () -> () loc(#loc)
}) {module.chip = "ALL", module.platform = "TPULANG", module.state = "TOP_QUANTIZED", module.top_run_mode = "STATIC", module.weight_file = "concat_int8_top_quantized_all_origin_weight.npz"} : () -> () loc(#loc)
#loc1 = loc("a")
#loc2 = loc("b")
#loc3 = loc("cat")
