// StepCostModel against FLOP and byte counts worked out by hand (the arithmetic is in the comments)
// for GPT-2 small's shape and the built-in model's (SmolLM2-135M). Torch-free.
#include <QtTest>

#include "model/step_cost.h"

using namespace servelab;

namespace {

ModelShape shapeOf(const char* architecture, int64_t layers, int64_t width, int64_t heads, int64_t kvHeads,
                   int64_t inner, int64_t vocab, int64_t context) {
  ModelShape s;
  s.architecture = architecture;
  s.n_layer = layers;
  s.n_embd = width;
  s.n_head = heads;
  s.n_kv_head = kvHeads;
  s.head_dim = width / heads;
  s.n_inner = inner;
  s.vocab_size = vocab;
  s.context = context;
  return s;
}

ModelShape gpt2Small() { return shapeOf("gpt2", 12, 768, 12, 12, 3072, 50257, 1024); }

// c_attn (q, k, v in one), c_proj, c_fc, mlp c_proj.
std::vector<MatrixShape> gpt2Projections() { return {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}}; }

// SmolLM2-135M: 9 query heads of 64 over 3 key/value heads, a tied head.
ModelShape smollm2() { return shapeOf("llama", 30, 576, 9, 3, 1536, 49152, 8192); }

// q, k, v, o, gate, up, down.
std::vector<MatrixShape> smollm2Projections() {
  return {{576, 576}, {576, 192}, {576, 192}, {576, 576}, {576, 1536}, {576, 1536}, {1536, 576}};
}

}  // namespace

class TestStepCost : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  // One decode row of GPT-2 small in fp32 with 10 positions cached.
  void gpt2Decode() {
    const StepCostModel model(gpt2Small(), gpt2Projections(), QuantSpec{}, 4, 4);
    const StepCost c = model.forward({{10, 1, 1}});
    // Block MACs per position: 768*2304 + 768*768 + 768*3072 + 3072*768 = 7,077,888.
    // FLOPs: 2*12*7,077,888 (blocks) + 2*768*50,257 (head) + 12 layers * 4 * (12*64) * 11 keys
    //      = 169,869,312 + 77,194,752 + 405,504.
    QCOMPARE(c.flops, 247469568.0);
    // Weights: 12*7,077,888*4 + 768*50,257*4 (head) + 2 embedding rows * 768 * 4.
    QCOMPARE(c.weight_bytes, 339738624.0 + 154389504.0 + 6144.0);
    // KV per position: 12 layers * 2 (k, v) * 12 heads * 64 * 4 bytes = 73,728.
    QCOMPARE(c.kv_read_bytes, 10 * 73728.0);
    QCOMPARE(c.kv_write_bytes, 73728.0);
    // Projection inputs and outputs per position and layer: 3,072 + 1,536 + 3,840 + 3,840 = 12,288;
    // the logits row: 768 + 50,257.
    QCOMPARE(c.activation_bytes, (12 * 12288.0 + 768 + 50257) * 4);
    QCOMPARE(c.bytes(), c.weight_bytes + c.kv_read_bytes + c.kv_write_bytes + c.activation_bytes);
    QCOMPARE(c.intensity(), c.flops / c.bytes());
  }

  // A 128-token prompt of SmolLM2-135M in fp32, in one chunk, logits for its last position only.
  void smollm2Prefill() {
    const StepCostModel model(smollm2(), smollm2Projections(), QuantSpec{}, 4, 4);
    const StepCost c = model.forward({{0, 128, 1}});
    // Block MACs per position: 576*576*2 + 576*192*2 + 576*1536*3 = 3,538,944.
    // FLOPs: 2*128*30*3,538,944 + 2*576*49,152 + 30 * 4 * (9*64) * (128*129/2 = 8,256 keys)
    //      = 27,179,089,920 + 56,623,104 + 570,654,720.
    QCOMPARE(c.flops, 27806367744.0);
    // Weights: 30*3,538,944*4 + 576*49,152*4 (tied head) + 128 token rows * 576 * 4 (no position table).
    QCOMPARE(c.weight_bytes, 424673280.0 + 113246208.0 + 294912.0);
    // KV per position: 30 * 2 * 3 kv heads * 64 * 4 = 46,080; nothing cached before.
    QCOMPARE(c.kv_read_bytes, 0.0);
    QCOMPARE(c.kv_write_bytes, 128 * 46080.0);
    // Projection I/O per position and layer: 1,152 + 768 + 768 + 1,152 + 2,112 * 3 = 10,176.
    QCOMPARE(c.activation_bytes, (128 * 30 * 10176.0 + 576 + 49152) * 4);
  }

  // A decode step of 8 SmolLM2 rows (100 to 107 positions cached) over int8 per-channel weights.
  void smollm2DecodeBatchInt8() {
    const StepCostModel model(smollm2(), smollm2Projections(), parse_quant_mode("int8-channel"), 4, 4);
    std::vector<CostRow> rows;
    for (int64_t s = 100; s < 108; ++s) rows.push_back({s, 1, 1});
    const StepCost c = model.forward(rows);
    // Keys: sum of (s + 1) for s in 100..107 = 836.
    QCOMPARE(c.flops, 2 * 8 * 30 * 3538944.0 + 2 * 8 * 576 * 49152.0 + 30 * 4 * 576 * 836.0);
    // int8: a byte a weight plus an fp32 scale per output row (5,184 rows a block; 49,152 in the head).
    QCOMPARE(c.weight_bytes, 30 * (3538944.0 + 4 * 5184) + (576 * 49152.0 + 4 * 49152) + 8 * 576 * 4.0);
    QCOMPARE(c.weight_bytes, 135316992.0);
    QCOMPARE(c.kv_read_bytes, 828 * 46080.0);  // 100 + ... + 107 = 828 positions
    QCOMPARE(c.kv_write_bytes, 8 * 46080.0);
  }

  // The bytes per weight of each stored layout.
  void matrixBytes() {
    const MatrixShape m{64, 10};
    QCOMPARE(StepCostModel::matrix_bytes(QuantSpec{}, 4, m), 2560.0);
    QCOMPARE(StepCostModel::matrix_bytes(parse_quant_mode("bf16"), 4, m), 1280.0);
    QCOMPARE(StepCostModel::matrix_bytes(parse_quant_mode("zp-uint8"), 4, m), 648.0);
    QCOMPARE(StepCostModel::matrix_bytes(parse_quant_mode("int4-g32"), 4, m), 320.0 + 8 * 20);
    QuantSpec once = parse_quant_mode("int4-g32");
    once.exec = QuantExec::DequantOnce;
    QCOMPARE(StepCostModel::matrix_bytes(once, 4, m), 2560.0);
  }

  // Weights run as a file stores them: the bytes per weight the kernels hold, for every matrix.
  void storedWeights() {
    StepCostModel model(smollm2(), smollm2Projections(), QuantSpec{}, 4, 4);
    model.set_stored_bytes_per_weight(0.625);  // Q4_1: 20 bytes per block of 32
    const StepCost c = model.forward({{10, 1, 1}});
    QCOMPARE(c.weight_bytes, 0.625 * (30 * 3538944.0 + 576 * 49152.0) + 576 * 4.0);
  }

  // A chunk mid-prompt produces no logits: no head read or computed; nothing at all costs nothing.
  void chunkWithoutLogitsAndEmpty() {
    const StepCostModel model(smollm2(), smollm2Projections(), QuantSpec{}, 4, 4);
    const StepCost c = model.forward({{64, 64, 0}});
    QCOMPARE(c.flops, 2 * 64 * 30 * 3538944.0 + 30 * 4 * 576 * (64 * 64 + 64 * 65 / 2.0));
    QCOMPARE(c.weight_bytes, 424673280.0 + 64 * 576 * 4.0);
    const StepCost none = model.forward({});
    QCOMPARE(none.flops, 0.0);
    QCOMPARE(none.intensity(), 0.0);
  }
};

QTEST_APPLESS_MAIN(TestStepCost)
#include "test_step_cost.moc"
