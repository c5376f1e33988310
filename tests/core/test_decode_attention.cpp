// The CPU decode attention (model/decode_attention): one query per row over its cached keys and
// values read in place, through paged block tables and through strided views of a dense cache
// (kv row map, padding masks, a row that sees nothing), on every instruction set this CPU has, for
// grouped-query and plain heads, head sizes on and off the vector widths, fp32 and bf16 caches; and
// attend() sending a CPU decode step to it with the same result as libtorch's SDPA.
#include <c10/core/InferenceMode.h>

#include <QtTest>

#include "model/decode_attention.h"
#include "model/layers.h"
#include "test_support.h"
#include "util/cpu_features.h"

using namespace servelab;

namespace {

// softmax(q k^T * scale) v over the visible positions of keys, values [S, H_kv, D] (fp32), for q [H, D].
at::Tensor reference(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                     const at::Tensor& visible, double scale) {
  const int64_t H = q.size(0), H_kv = keys.size(1);
  const at::Tensor k = keys.to(at::kFloat).repeat_interleave(H / H_kv, 1);
  const at::Tensor v = values.to(at::kFloat).repeat_interleave(H / H_kv, 1);
  at::Tensor scores = at::einsum("hd,lhd->hl", {q.to(at::kFloat), k}) * scale;
  if (visible.defined()) {
    if (!visible.any().item<bool>()) return at::zeros({H, q.size(1)});
    scores =
        scores.masked_fill(visible.logical_not().view({1, -1}), -std::numeric_limits<double>::infinity());
  }
  return at::einsum("hl,lhd->hd", {at::softmax(scores, -1), v});
}

}  // namespace

class TestDecodeAttention : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void paged_kernel_on_every_isa() {
    // The decode kernel against softmax(q k^T * scale) v over each row's keys gathered through
    // its block table, on every instruction set this CPU has (each is its own compiled loop), for
    // grouped-query heads, head sizes off the 16-lane width, scattered blocks and ragged lengths.
    c10::InferenceMode guard;
    at::manual_seed(3);
    const int64_t bs = 4, H = 6, H_kv = 2, blocks = 24;
    for (int64_t D : {8, 24, 64, 128})
      for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
        const at::Tensor keys = at::randn({blocks * bs, H_kv, D}).to(dt), values = at::randn_like(keys);
        const std::vector<std::vector<int64_t>> tables = {{5, 2, 17}, {0}, {23, 1, 9, 11, 4}};
        const std::vector<int64_t> lengths = {11, 3, 20};
        const int64_t B = 3;
        const at::Tensor q = at::randn({B, H, 1, D}).to(dt);
        std::vector<const std::vector<int64_t>*> t;
        for (const auto& table : tables) t.push_back(&table);
        std::vector<at::Tensor> expect;
        for (int64_t b = 0; b < B; ++b) {
          std::vector<int64_t> slot;
          for (int64_t p = 0; p < lengths[static_cast<size_t>(b)]; ++p)
            slot.push_back(tables[static_cast<size_t>(b)][static_cast<size_t>(p / bs)] * bs + p % bs);
          const at::Tensor idx = at::tensor(slot, at::kLong);
          const at::Tensor k = keys.index_select(0, idx).to(at::kFloat).repeat_interleave(H / H_kv, 1);
          const at::Tensor v = values.index_select(0, idx).to(at::kFloat).repeat_interleave(H / H_kv, 1);
          const at::Tensor scores = at::einsum("hd,lhd->hl", {q[b].squeeze(1).to(at::kFloat), k}) * 0.3;
          expect.push_back(at::einsum("hl,lhd->hd", {at::softmax(scores, -1), v}));
        }
        const at::Tensor want = at::stack(expect).unsqueeze(2);
        for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
          if (!cpu_supports(isa)) continue;
          const test::IsaScope isa_scope(isa);
          const at::Tensor got =
              paged_decode_attention_cpu(q, keys, values, paged_positions(t, lengths, bs), 0.3);
          QCOMPARE(got.scalar_type(), dt);
          const double tol = dt == at::kFloat ? 1e-5 : 2e-2;
          QVERIFY2(test::max_abs_diff(got.to(at::kFloat), want) < tol,
                   qPrintable(QString("%1, D %2, %3").arg(isa_name(isa)).arg(D).arg(c10::toString(dt))));
        }
      }
  }

  void dense_kernel_on_every_isa() {
    // A dense cache [R, H_kv, capacity, D] narrowed to S positions (so rows and heads are strided
    // views), queries reading rows out of order, a padding mask per cache row, and one row that
    // sees no key at all (its output is zero, not NaN).
    c10::InferenceMode guard;
    at::manual_seed(5);
    const int64_t R = 4, S = 29, capacity = 37;
    for (auto [H, H_kv] : {std::pair<int64_t, int64_t>{6, 2}, {4, 4}, {8, 1}})
      for (int64_t D : {8, 24, 64, 128})
        for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
          const at::Tensor cache_k = at::randn({R, H_kv, capacity, D}).to(dt),
                           cache_v = at::randn_like(cache_k);
          const at::Tensor keys = cache_k.narrow(2, 0, S), values = cache_v.narrow(2, 0, S);
          at::Tensor mask = at::rand({R, 1, 1, S}) > 0.3;
          mask.select(0, 1).fill_(false);  // cache row 1 sees nothing
          mask.select(0, 2).fill_(true);
          const at::Tensor rows = at::tensor(std::vector<int64_t>{2, 0, 3, 1, 2}, at::kLong);
          const int64_t B = rows.numel();
          const at::Tensor q = at::randn({B, H, 1, D}).to(dt);
          std::vector<at::Tensor> expect;
          for (int64_t b = 0; b < B; ++b) {
            const int64_t r = rows[b].item<int64_t>();
            expect.push_back(reference(q[b].squeeze(1), keys[r].transpose(0, 1), values[r].transpose(0, 1),
                                       mask[r].view({S}), 0.125));
          }
          const at::Tensor want = at::stack(expect).unsqueeze(2);
          for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
            if (!cpu_supports(isa)) continue;
            const test::IsaScope isa_scope(isa);
            QVERIFY(dense_decode_attention_applies(q, keys, values, mask));
            const at::Tensor got = dense_decode_attention_cpu(q, keys, values, mask, rows, 0.125);
            QCOMPARE(got.scalar_type(), dt);
            QVERIFY(got.isfinite().all().item<bool>());
            const double tol = dt == at::kFloat ? 1e-5 : 2e-2;
            QVERIFY2(test::max_abs_diff(got.to(at::kFloat), want) < tol,
                     qPrintable(QString("%1, H %2/%3, D %4, %5, %6")
                                    .arg(isa_name(isa))
                                    .arg(H)
                                    .arg(H_kv)
                                    .arg(D)
                                    .arg(c10::toString(dt))
                                    .arg(QString::fromStdString(decode_attention_kernel(dt, D)))));
            // No row map and no mask: row b reads row b, every key.
            const at::Tensor q4 = q.narrow(0, 0, R);
            std::vector<at::Tensor> all;
            for (int64_t r = 0; r < R; ++r)
              all.push_back(reference(q4[r].squeeze(1), keys[r].transpose(0, 1), values[r].transpose(0, 1),
                                      at::Tensor(), 0.125));
            QVERIFY(test::max_abs_diff(
                        dense_decode_attention_cpu(q4, keys, values, at::Tensor(), at::Tensor(), 0.125)
                            .to(at::kFloat),
                        at::stack(all).unsqueeze(2)) < tol);
          }
        }
  }

  void scores_far_apart_and_long_contexts() {
    // Scores hundreds apart (the vector exp must give exactly 0 where e^x underflows, and the
    // softmax must stay finite) over a context longer than any vector tail, on every ISA.
    c10::InferenceMode guard;
    at::manual_seed(9);
    const int64_t R = 2, H = 9, H_kv = 3, D = 64, S = 1000;
    const at::Tensor keys = at::randn({R, H_kv, S, D}) * 4, values = at::randn_like(keys);
    const at::Tensor q = at::randn({R, H, 1, D}) * 4;
    std::vector<at::Tensor> expect;
    for (int64_t r = 0; r < R; ++r)
      expect.push_back(
          reference(q[r].squeeze(1), keys[r].transpose(0, 1), values[r].transpose(0, 1), at::Tensor(), 1.0));
    const at::Tensor want = at::stack(expect).unsqueeze(2);
    for (Isa isa : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
      if (!cpu_supports(isa)) continue;
      const test::IsaScope isa_scope(isa);
      const at::Tensor got = dense_decode_attention_cpu(q, keys, values, at::Tensor(), at::Tensor(), 1.0);
      QVERIFY2(test::max_abs_diff(got, want) < 1e-4, isa_name(isa));
    }
  }

  void attend_sends_decode_steps_to_the_kernel() {
    // attend() on a CPU decode step (grouped heads, a padding mask) with the kernel and with
    // libtorch's SDPA (decode_kernel off, the paged gather baseline) agree; a malformed operand
    // is refused by the kernel rather than read out of bounds.
    c10::InferenceMode guard;
    at::manual_seed(4);
    const at::Tensor q = at::randn({3, 9, 1, 64}), k = at::randn({3, 3, 40, 64}), v = at::randn_like(k);
    AttentionMask m;
    m.mask = at::rand({3, 1, 1, 40}) > 0.2;
    m.mask.select(3, 39).fill_(true);
    m.keys = 40;
    AttentionParams p;
    p.scale = 0.125;
    const at::Tensor ours = attend(q, k, v, m, p);
    p.decode_kernel = false;
    const at::Tensor sdpa = attend(q, k, v, m, p);
    QVERIFY(test::max_abs_diff(ours, sdpa) < 1e-5);
    QVERIFY(!dense_decode_attention_applies(q, k, v.narrow(2, 0, 39), m.mask));
    QVERIFY(!dense_decode_attention_applies(q, k.transpose(2, 3), v.transpose(2, 3), m.mask));
    QVERIFY_THROWS_EXCEPTION(
        InputError,
        dense_decode_attention_cpu(q, k, v, m.mask, at::tensor(std::vector<int64_t>{0, 1, 3}), 0.1));
    // A block table too short for the row's length is refused, not read past.
    const std::vector<int64_t> table = {2, 0};
    const std::vector<const std::vector<int64_t>*> tables = {&table};
    QVERIFY_THROWS_EXCEPTION(InputError, paged_positions(tables, std::vector<int64_t>{9}, 4));
  }
};

QTEST_APPLESS_MAIN(TestDecodeAttention)
#include "test_decode_attention.moc"
