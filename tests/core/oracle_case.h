#pragma once
// What the registry's oracle suites (test_qwen3_oracle, test_family_oracle) share: a fixture case
// (a tiny HF checkpoint written by a tests/oracle script, with transformers' logits and greedy
// tokens) loaded through the architecture registry, and the checks every family runs.
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "generate/generator.h"
#include "model/architecture.h"
#include "model/llama_config.h"
#include "model/safetensors_file.h"
#include "test_support.h"

namespace servelab::test {

struct OracleCase {
  const Architecture* arch = nullptr;
  std::unique_ptr<Model> model;
  nlohmann::json ref;
  std::map<std::string, at::Tensor> tensors;
  std::vector<std::vector<int32_t>> prompts() const {
    return ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  }
  std::vector<int32_t> single(size_t i) const { return ref["single"][i].get<std::vector<int32_t>>(); }
  IdTokenizer id_tokenizer() const {
    return IdTokenizer(static_cast<int32_t>(model->shape().vocab_size), ref["eos"].get<int32_t>());
  }
  // Greedy with the KV cache for the fixture's token count, not stopping at EOS (HF's reference).
  GenerateOptions greedy() const {
    GenerateOptions o;
    o.max_new_tokens = ref["new_tokens"].get<int64_t>();
    o.use_kv_cache = true;
    o.stop_at_eos = false;
    return o;
  }
};

// The case in `dir`, as the engine loads a folder: the record of its model_type builds the model.
inline OracleCase load_oracle_case(const std::filesystem::path& d,
                                   AttentionBackend backend = AttentionBackend::Sdpa) {
  OracleCase c;
  c.arch = &architecture_for_model_type(read_model_type(d.string()), d.string());
  c.model = c.arch->load_folder(d.string(), at::Device(at::kCPU), at::kFloat);
  c.model->set_attention_backend(backend);
  std::ifstream(d / "reference.json") >> c.ref;
  SafetensorsFile ref = SafetensorsFile::open((d / "reference.safetensors").string());
  for (const auto& t : ref.tensors())
    c.tensors[t.name] = at::from_blob(const_cast<std::byte*>(t.data), t.shape, at::kFloat).clone();
  return c;
}

// QTest rows "case/sdpa" and "case/manual" (columns name, backend) for every case.
template <typename Names>
void add_backend_rows(const Names& names) {
  QTest::addColumn<QString>("name");
  QTest::addColumn<int>("backend");
  for (const char* n : names) {
    QTest::newRow((std::string(n) + "/sdpa").c_str())
        << QString(n) << static_cast<int>(AttentionBackend::Sdpa);
    QTest::newRow((std::string(n) + "/manual").c_str())
        << QString(n) << static_cast<int>(AttentionBackend::Manual);
  }
}

inline at::Tensor row_ids(const std::vector<int32_t>& p) {
  return at::tensor(std::vector<int64_t>(p.begin(), p.end())).unsqueeze(0);
}

// Every prompt's full logits within 1e-4 of HF's.
inline void check_full_logits(const Model& m, const OracleCase& c) {
  const auto ps = c.prompts();
  for (size_t i = 0; i < ps.size(); ++i) {
    at::Tensor logits =
        m.forward({row_ids(ps[i]), at::arange(static_cast<int64_t>(ps[i].size())).unsqueeze(0), at::Tensor(),
                   true})
            .squeeze(0);
    const double d = max_abs_diff(logits, c.tensors.at("logits_" + std::to_string(i)));
    QVERIFY2(d < 1e-4, qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(d)));
  }
}

// The row's case (add_backend_rows) loaded by load(name, backend): full logits within 1e-4 of HF's.
template <typename Load>
void check_full_logits_row(Load&& load) {
  QFETCH(QString, name);
  QFETCH(int, backend);
  c10::InferenceMode guard;
  const auto c = load(name, static_cast<AttentionBackend>(backend));
  check_full_logits(*c.model, c);
}

// Prompt 0 prefilled two positions at a time then decoded one at a time through the KV cache, and
// the left-padded batch's last logits, within 1e-4 of HF's.
inline void check_kv_cache_and_batch(const OracleCase& c) {
  const auto p = c.prompts()[0];
  const at::Tensor ref = c.tensors.at("logits_0");
  KvCache cache = c.model->make_cache(1, static_cast<int64_t>(p.size()));
  const at::Tensor ids = row_ids(p);
  at::Tensor out =
      c.model->forward({ids.narrow(1, 0, 2), at::arange(2).unsqueeze(0), at::Tensor(), true}, &cache);
  QVERIFY(max_abs_diff(out.squeeze(0), ref.narrow(0, 0, 2)) < 1e-4);
  for (int64_t t = 2; t < static_cast<int64_t>(p.size()); ++t) {
    at::Tensor l =
        c.model->forward({ids.narrow(1, t, 1), at::full({1, 1}, t, at::kLong), at::Tensor(), false}, &cache);
    const double d = max_abs_diff(l.squeeze(0), ref[t]);
    QVERIFY2(d < 1e-4, qPrintable(QString("position %1: max |logit diff| = %2").arg(t).arg(d)));
  }
  PaddedBatch pb = left_padded_batch(c.prompts(), c.ref["eos"].get<int32_t>());
  const double d = max_abs_diff(c.model->forward({pb.input_ids, pb.position_ids, pb.attention_mask, false}),
                                c.tensors.at("batch_last_logits"));
  QVERIFY2(d < 1e-4, qPrintable(QString("batch: max |logit diff| = %1").arg(d)));
}

// Greedy tokens alone and as one left-padded batch equal HF's.
inline void check_greedy(const OracleCase& c) {
  const IdTokenizer tok = c.id_tokenizer();
  const GenerateOptions o = c.greedy();
  const auto ps = c.prompts();
  for (size_t i = 0; i < ps.size(); ++i)
    QCOMPARE(generate(*c.model, tok, {ps[i]}, o).sequences[0].generated_ids, c.single(i));
  GenerateResult b = generate(*c.model, tok, ps, o);
  for (size_t i = 0; i < ps.size(); ++i) {
    QCOMPARE(b.sequences[i].generated_ids, c.ref["batch"]["tokens"][i].get<std::vector<int32_t>>());
    QCOMPARE(b.sequences[i].generated_ids, c.single(i));
  }
}

}  // namespace servelab::test
