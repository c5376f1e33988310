#include "quant/quant_spec.h"

#include "util/errors.h"

namespace servelab {

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

std::vector<std::string> quant_mode_names() {
  return {"none", "zp-uint8", "int8-channel", "int4-g32", "int4-g64", "int4-g128", "fp16", "bf16"};
}

std::vector<std::string> quant_exec_names() { return {"dequant-once", "jit", "jit-int8", "native", "auto"}; }

std::string QuantSpec::mode_name() const {
  switch (scheme) {
    case QuantScheme::None:
      return "none";
    case QuantScheme::ZeroPointUint8:
      return "zp-uint8";
    case QuantScheme::PerChannelInt8:
      return "int8-channel";
    case QuantScheme::Int4Group:
      return "int4-g" + std::to_string(group_size);
    case QuantScheme::Int8Group:
      return "int8-g" + std::to_string(group_size);
    case QuantScheme::Fp16:
      return "fp16";
    case QuantScheme::Bf16:
      return "bf16";
  }
  return "?";
}

QuantSpec parse_quant_mode(const std::string& mode) {
  QuantSpec s;
  if (mode == "none" || mode == "fp32") {
    s.scheme = QuantScheme::None;
  } else if (mode == "zp-uint8") {
    s.scheme = QuantScheme::ZeroPointUint8;
  } else if (mode == "int8-channel") {
    s.scheme = QuantScheme::PerChannelInt8;
  } else if (mode == "int4-g32" || mode == "int4-g64" || mode == "int4-g128") {
    s.scheme = QuantScheme::Int4Group;
    s.group_size = std::stoi(mode.substr(6));
  } else if (mode == "fp16") {
    s.scheme = QuantScheme::Fp16;
  } else if (mode == "bf16") {
    s.scheme = QuantScheme::Bf16;
  } else {
    throw InputError("unknown quantization mode '" + mode + "' (choose one of " + join(quant_mode_names()) +
                     ")");
  }
  return s;
}

QuantExec parse_quant_exec(const std::string& exec) {
  if (exec == "dequant-once") return QuantExec::DequantOnce;
  if (exec == "jit") return QuantExec::Jit;
  if (exec == "jit-int8") return QuantExec::JitInt8;
  if (exec == "native") return QuantExec::Native;
  if (exec == "auto") return QuantExec::Auto;
  throw InputError("unknown quantized execution '" + exec + "' (choose one of " + join(quant_exec_names()) +
                   ")");
}

const char* quant_exec_name(QuantExec exec) {
  switch (exec) {
    case QuantExec::DequantOnce:
      return "dequant-once";
    case QuantExec::Jit:
      return "jit";
    case QuantExec::JitInt8:
      return "jit-int8";
    case QuantExec::Native:
      return "native";
    case QuantExec::Auto:
      return "auto";
  }
  return "?";
}

}  // namespace servelab
