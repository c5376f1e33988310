#pragma once
// Which quantization and how it runs, as plain names the CLI and the GUI share. Torch-free.
#include <string>
#include <vector>

namespace servelab {

enum class QuantScheme {
  None,            // the fp32 weights as loaded
  ZeroPointUint8,  // the course (lesson 4): per tensor, scale = (max - min) / 255, zero point = min
  PerChannelInt8,  // symmetric int8, one scale per output channel (row)
  Int4Group,       // asymmetric 4-bit, scale and minimum per group of group_size inputs, 2 per byte
  Int8Group,       // symmetric int8, one scale per group of group_size inputs (GGUF's Q8_0 at 32)
  Fp16,
  Bf16,
};

enum class QuantExec {
  DequantOnce,  // the course: dequantize every weight back to fp32 once; saves memory on disk only
  Jit,          // weights stay quantized; each linear dequantizes a cache-sized block at a time
  JitInt8,      // Jit, with int4/int8 groups of 32 multiplied by int8-quantized activations in
                // integers (quant/int8_activations.h), as llama.cpp does; the others as Jit
  Native,       // a library kernel that reads the quantized weights directly (fbgemm int8, ...)
  Auto,         // Native where the scheme has a kernel on the device, else Jit
};

struct QuantSpec {
  QuantScheme scheme = QuantScheme::None;
  int group_size = 64;  // Int4Group: 32, 64 or 128; Int8Group: 32 (GGUF's Q8_0 as stored)
  QuantExec exec = QuantExec::Auto;

  // "int4-g64", "int8-channel", ...: the name parse_quant_mode accepts.
  std::string mode_name() const;
  bool is_quantized() const { return scheme != QuantScheme::None; }
};

// Mode names: none, zp-uint8, int8-channel, int4-g32, int4-g64, int4-g128, fp16, bf16.
// Throws InputError naming the accepted modes.
QuantSpec parse_quant_mode(const std::string& mode);
// dequant-once, jit, jit-int8, native, auto. Throws InputError naming the accepted ones.
QuantExec parse_quant_exec(const std::string& exec);
const char* quant_exec_name(QuantExec exec);
std::vector<std::string> quant_mode_names();
std::vector<std::string> quant_exec_names();

}  // namespace servelab
