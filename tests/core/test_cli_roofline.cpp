// servelab-cli bench roofline on the demo model (GPT-2 small's shape) with a short workload: the
// JSON's shape, every point's intensity equal to its FLOPs over its bytes, the machine limits cached
// and read back, and quantized weights moving fewer bytes for the same FLOPs; the KV-cache timing's
// and the batch sweep's steps on the roofline against hand-computed FLOPs. No timing is asserted.
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include "cli_runner.h"

class TestCliRoofline : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;

  QJsonObject roofline(const QString& decodeBatches, const QStringList& extra = {}) {
    QStringList args{"bench",
                     "roofline",
                     "--demo",
                     "--prefill-lengths",
                     "16,64",
                     "--decode-batches",
                     decodeBatches,
                     "--decode-context",
                     "16",
                     "--decode-steps",
                     "2",
                     "--repeats",
                     "1",
                     "--limits-cache",
                     tmp_.filePath("limits.json"),
                     "--json"};
    args << extra;
    const servelab::test::CliRun r = servelab::test::run_cli(SERVELAB_CLI, args);
    if (r.code != 0) qWarning() << r.err;
    return QJsonDocument::fromJson(r.out.toUtf8()).object();
  }

 private Q_SLOTS:
  void pointsAndLimits() {
    const QJsonObject j = roofline("1,8,32");
    QCOMPARE(j["experiment"].toString(), QStringLiteral("roofline"));
    const QJsonObject m = j["machine"].toObject();
    for (const char* key : {"cpu", "isa", "device", "measured_at"})
      QVERIFY2(!m[key].toString().isEmpty(), key);
    QVERIFY(m["threads"].toInt() > 0);
    QVERIFY(m["read_gb_s"].toDouble() > 0);
    QVERIFY(m["fp32_gflop_s"].toDouble() > 0);
    QVERIFY(m["int8_gop_s"].toDouble() >= 0);  // 0 where our integer kernel does not run
    QCOMPARE(m["int8_kernel"].toString().isEmpty(), m["int8_gop_s"].toDouble() == 0);
    QVERIFY(qFuzzyCompare(m["ridge_flop_per_byte"].toDouble(),
                          m["fp32_gflop_s"].toDouble() / m["read_gb_s"].toDouble()));
    const QJsonArray points = j["points"].toArray();
    QCOMPARE(points.size(), 5);
    QStringList labels;
    for (const QJsonValue& v : points) {
      const QJsonObject p = v.toObject();
      labels << p["label"].toString();
      QCOMPARE(p["quant"].toString(), QStringLiteral("none"));
      QVERIFY(p["flops"].toDouble() > 0);
      QVERIFY(p["bytes"].toDouble() > 0);
      QVERIFY(p["ms"].toDouble() > 0);
      QVERIFY(qFuzzyCompare(p["intensity"].toDouble(), p["flops"].toDouble() / p["bytes"].toDouble()));
      QVERIFY(qFuzzyCompare(p["flop_s"].toDouble(), p["flops"].toDouble() / (p["ms"].toDouble() * 1e-3)));
    }
    QCOMPARE(labels, (QStringList{"prefill 16 tokens", "prefill 64 tokens", "decode batch 1",
                                  "decode batch 8", "decode batch 32"}));
    // Decode reads every weight for one position a row: a bigger batch, more FLOPs per byte.
    const auto intensity = [&](int i) { return points[i].toObject()["intensity"].toDouble(); };
    QVERIFY(intensity(2) < intensity(3));
    QVERIFY(intensity(3) < intensity(4));
    QVERIFY(intensity(0) < intensity(1));

    // The limits were cached: a second run reads them back unchanged; --remeasure measures anew.
    QFile cache(tmp_.filePath("limits.json"));
    QVERIFY(cache.open(QIODevice::ReadOnly));
    const QJsonObject cached = QJsonDocument::fromJson(cache.readAll()).object();
    QCOMPARE(cached["measured_at"].toString(), m["measured_at"].toString());
    const QJsonObject again = roofline("1,8,32")["machine"].toObject();
    QCOMPARE(again["read_gb_s"].toDouble(), m["read_gb_s"].toDouble());
    QCOMPARE(again["fp32_gflop_s"].toDouble(), m["fp32_gflop_s"].toDouble());
  }

  // int8 weights: the same FLOPs, about a quarter of the weight bytes (decode is mostly weights).
  void quantizedWeightsMoveFewerBytes() {
    const QJsonObject fp32 = roofline("1");
    const QJsonObject int8 = roofline("1", {"--quant", "int8-channel"});
    const QJsonObject a = fp32["points"].toArray().last().toObject();
    const QJsonObject b = int8["points"].toArray().last().toObject();
    QCOMPARE(b["quant"].toString(), QStringLiteral("int8-channel"));
    QCOMPARE(b["flops"].toDouble(), a["flops"].toDouble());
    QVERIFY2(b["bytes"].toDouble() < a["bytes"].toDouble() / 3,
             qPrintable(QStringLiteral("%1 vs %2").arg(b["bytes"].toDouble()).arg(a["bytes"].toDouble())));
    QVERIFY(b["intensity"].toDouble() > 3 * a["intensity"].toDouble());
  }

  // The KV-cache timing records each token's step cost: with 10 prompt tokens cached, the second
  // token's step is test_step_cost's GPT-2 decode (247,469,568 FLOPs); without the cache it is a
  // forward over all 11 positions: 11 * 169,869,312 (blocks) + 77,194,752 (head) + 12 * 4 * 768 * 66
  // (attention over 1 + 2 + ... + 11 keys).
  void kvCacheTimingRecordsCost() {
    const servelab::test::CliRun r =
        servelab::test::run_cli(SERVELAB_CLI, {"bench", "kv-cache", "--demo", "--prompt-tokens", "10",
                                               "--new-tokens", "3", "--repeats", "1", "--json"});
    QCOMPARE(r.code, 0);
    const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    const QJsonArray cache = j["cache_flops"].toArray(), noCache = j["no_cache_flops"].toArray();
    QCOMPARE(cache.size(), 3);
    QCOMPARE(noCache.size(), 3);
    QCOMPARE(cache[1].toDouble(), 247469568.0);
    QCOMPARE(cache[0].toDouble(), noCache[0].toDouble());  // the prefill is the same either way
    QCOMPARE(noCache[1].toDouble(), 1948190208.0);
    QCOMPARE(j["cache_bytes"].toArray().size(), 3);
    // Its roofline: the prefill step, the cached decode steps and the recomputing ones, each kind's
    // costs over its times (per step: the means of the steps after the first).
    const QJsonArray steps = j["roofline"].toArray();
    QCOMPARE(steps.size(), 3);
    const QJsonArray cacheMs = j["cache_ms"].toArray(), noCacheMs = j["no_cache_ms"].toArray();
    const QJsonObject prefill = steps[0].toObject(), decode = steps[1].toObject(),
                      recompute = steps[2].toObject();
    QCOMPARE(prefill["kind"].toString(), QStringLiteral("prefill"));
    QCOMPARE(prefill["flops"].toDouble(), cache[0].toDouble());
    QCOMPARE(prefill["ms"].toDouble(), cacheMs[0].toDouble());
    QCOMPARE(decode["kind"].toString(), QStringLiteral("decode"));
    QCOMPARE(decode["flops"].toDouble(), (cache[1].toDouble() + cache[2].toDouble()) / 2);
    QVERIFY(qFuzzyCompare(decode["ms"].toDouble(), (cacheMs[1].toDouble() + cacheMs[2].toDouble()) / 2));
    QCOMPARE(recompute["kind"].toString(), QStringLiteral("recompute"));
    QCOMPARE(recompute["flops"].toDouble(), (noCache[1].toDouble() + noCache[2].toDouble()) / 2);
    QVERIFY(
        qFuzzyCompare(recompute["ms"].toDouble(), (noCacheMs[1].toDouble() + noCacheMs[2].toDouble()) / 2));
    // One position a step reads every weight for it: the cached step does far less per byte.
    QVERIFY(decode["intensity"].toDouble() * 5 < recompute["intensity"].toDouble());
  }

  // The batch sweep's roofline: each batch size's prefill and decode steps. The course's prompts
  // are left-padded to 7 GPT-2 tokens, so a row's decode steps start at 7 and 8 cached positions:
  // per row and step 169,869,312 (blocks) + 77,194,752 (head) + 36,864 per key (12 layers * 4 *
  // 768) over 8 and 9 keys, 247,377,408 on average; b rows b times that. The weights are read once
  // a step whatever b is, so the intensity grows almost b-fold.
  void batchSweepRecordsSteps() {
    const servelab::test::CliRun r =
        servelab::test::run_cli(SERVELAB_CLI, {"bench", "batch-sweep", "--demo", "--batch-sizes", "1,4",
                                               "--new-tokens", "3", "--repeats", "1", "--json"});
    QCOMPARE(r.code, 0);
    const QJsonArray points = QJsonDocument::fromJson(r.out.toUtf8()).object()["points"].toArray();
    QCOMPARE(points.size(), 2);
    QList<QJsonObject> decode;
    for (const QJsonValue& v : points) {
      const QJsonArray steps = v.toObject()["roofline"].toArray();
      QCOMPARE(steps.size(), 2);
      QCOMPARE(steps[0].toObject()["kind"].toString(), QStringLiteral("prefill"));
      QCOMPARE(steps[1].toObject()["kind"].toString(), QStringLiteral("decode"));
      decode << steps[1].toObject();
    }
    QCOMPARE(decode[0]["label"].toString(), QStringLiteral("decode batch 1"));
    QCOMPARE(decode[0]["flops"].toDouble(), 247377408.0);
    QCOMPARE(decode[1]["flops"].toDouble(), 4 * 247377408.0);
    QCOMPARE(decode[1]["rows"].toInt(), 4);
    QVERIFY(decode[1]["intensity"].toDouble() > 3.5 * decode[0]["intensity"].toDouble());
    QVERIFY(decode[1]["bytes"].toDouble() < 1.1 * decode[0]["bytes"].toDouble());
  }

  // Every scheduler step that ran a forward pass records its FLOPs and bytes; a step of d decode
  // rows costs d times GPT-2's per-token projections and head, plus attention over at most 1,024 keys.
  void schedulerStepsRecordCost() {
    const servelab::test::CliRun r =
        servelab::test::run_cli(SERVELAB_CLI, {"bench", "sync-vs-continuous", "--demo", "--requests", "3",
                                               "--max-batch", "2", "--long-every", "2", "--long-tokens", "4",
                                               "--short-tokens", "2", "--no-naive", "--json"});
    QCOMPARE(r.code, 0);
    const QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    int decodeOnly = 0;
    for (const QJsonValue& run : j["runs"].toArray()) {
      for (const QJsonValue& v : run.toObject()["steps"].toArray()) {
        const QJsonObject s = v.toObject();
        if (s["forward_calls"].toInt() == 0) continue;
        QVERIFY(s["flops"].toDouble() > 0);
        QVERIFY(s["bytes"].toDouble() > 0);
        if (s["prefill_tokens"].toInt() != 0) continue;
        ++decodeOnly;
        const double rows = s["decode_tokens"].toDouble();
        const double perToken = 2 * 12 * 7077888.0 + 2 * 768 * 50257.0;
        QVERIFY(s["flops"].toDouble() > rows * perToken);
        QVERIFY(s["flops"].toDouble() < rows * (perToken + 12 * 4 * 768 * 1024.0));
      }
    }
    QVERIFY(decodeOnly > 0);
  }

  void refusesBadInput() {
    const servelab::test::CliRun r = servelab::test::run_cli(
        SERVELAB_CLI,
        {"bench", "roofline", "--demo", "--prefill-lengths", "0", "--limits-cache", "", "--json"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("prefill length"), qPrintable(r.err));
    const servelab::test::CliRun word = servelab::test::run_cli(
        SERVELAB_CLI,
        {"bench", "roofline", "--demo", "--decode-batches", "1,x", "--limits-cache", "", "--json"});
    QCOMPARE(word.code, 2);  // not a number: a usage error
    QVERIFY2(word.err.contains("--decode-batches"), qPrintable(word.err));
    const servelab::test::CliRun tooLong = servelab::test::run_cli(
        SERVELAB_CLI,
        {"bench", "roofline", "--demo", "--prefill-lengths", "5000", "--limits-cache", "", "--json"});
    QCOMPARE(tooLong.code, 1);
    QVERIFY2(tooLong.err.contains("prefill length"), qPrintable(tooLong.err));
  }
};

QTEST_GUILESS_MAIN(TestCliRoofline)
#include "test_cli_roofline.moc"
