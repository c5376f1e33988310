// servelab-cli as scripts use it: its fixed JSON interface, and one readable stderr line with a
// non-zero exit code for every bad input (never a crash or a stack trace).
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "cli_runner.h"

class TestCli : public QObject {
  Q_OBJECT

  using Run = servelab::test::CliRun;
  Run cli(const QStringList& args) { return servelab::test::run_cli(SERVELAB_CLI, args); }
  // The built-in SmolLM2 GGUF is installed by scripts/bootstrap; machines without it (the GPU
  // machine, which carries no 98 MB file) skip what needs it.
  static bool have_builtin() { return QFileInfo::exists(QStringLiteral(SERVELAB_BUILTIN_MODEL)); }

  QList<QJsonObject> json_lines(const QString& out) {
    QList<QJsonObject> objs;
    for (const QString& line : out.split('\n', Qt::SkipEmptyParts)) {
      QJsonParseError err;
      QJsonDocument d = QJsonDocument::fromJson(line.toUtf8(), &err);
      if (err.error != QJsonParseError::NoError) qWarning() << "not JSON:" << line;
      objs.append(d.object());
    }
    return objs;
  }

  static std::vector<int> ints(const QJsonValue& v) {
    std::vector<int> out;
    for (const auto& x : v.toArray()) out.push_back(x.toInt());
    return out;
  }

 private Q_SLOTS:
  void info_reports_gpt2_small() {
    Run r = cli({"info", "--demo"});
    QCOMPARE(r.code, 0);
    QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(j["parameters"].toInteger(), 124439808);
    QCOMPARE(j["weight_bytes"].toInteger(), 124439808LL * 4);
    QCOMPARE(j["dtype"].toString(), QString("fp32"));
    QCOMPARE(j["device"].toString(), QString("cpu"));
    QVERIFY(j["caveat"].toString().contains("random weights"));
  }

  void info_reports_the_isa() {
    // The CPU and the ISA our kernels run, the best the CPU has by default; --isa and SERVELAB_ISA
    // force one the CPU has, and refuse (exit 1, one line naming the option) one it lacks.
    Run r = cli({"info", "--demo"});
    QCOMPARE(r.code, 0);
    const QJsonObject cpu = QJsonDocument::fromJson(r.out.toUtf8()).object()["cpu"].toObject();
    QVERIFY(!cpu["model"].toString().isEmpty());
    const QString best = cpu["best_isa"].toString();
    QCOMPARE(cpu["isa"].toString(), best);
    const QStringList order = {"avx512", "avx2", "generic"};
    QVERIFY2(order.contains(best), qPrintable(best));
    for (const QString& isa : order) {
      Run f = cli({"info", "--demo", "--isa", isa});
      if (order.indexOf(isa) < order.indexOf(best)) {
        QCOMPARE(f.code, 1);
        QVERIFY2(f.err.contains("--isa") && f.err.contains("cannot run " + isa), qPrintable(f.err));
        continue;
      }
      QCOMPARE(f.code, 0);
      const QJsonObject j = QJsonDocument::fromJson(f.out.toUtf8()).object();
      QCOMPARE(j["cpu"].toObject()["isa"].toString(), isa);
      const QJsonObject kernels = j["cpu"].toObject()["kernels"].toObject();
      QVERIFY(kernels.contains("fp32_blocked") && kernels.contains("quantized_jit"));
      // The demo model's fp32 heads of 64 take the explicit vectors where the ISA has them.
      const QString attention = kernels["decode_attention"].toString();
      QVERIFY2(
          isa == "generic" ? attention.startsWith("portable") : attention.contains("fp32 decode attention"),
          qPrintable(attention));
      // The fp32 model's projections run what the ISA has: our blocked kernels where it has vector
      // kernels of ours, oneDNN under generic.
      const QString gemm = j["gemm"].toString();
      QVERIFY2(isa == "generic" ? !gemm.contains("blocked") : gemm.contains(isa), qPrintable(gemm));
    }
    QCOMPARE(cli({"info", "--demo", "--isa", "sse9"}).code, 2);  // not an ISA: a usage error
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("SERVELAB_ISA", "sse9");
    p.setProcessEnvironment(env);
    p.start(SERVELAB_CLI, {"info", "--demo"});
    QVERIFY(p.waitForFinished(300000));
    QCOMPARE(p.exitCode(), 1);
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(err.contains("SERVELAB_ISA") && err.contains("sse9"), qPrintable(err));
    env.insert("SERVELAB_ISA", "generic");
    p.setProcessEnvironment(env);
    p.start(SERVELAB_CLI, {"info", "--demo"});
    QVERIFY(p.waitForFinished(300000));
    QCOMPARE(p.exitCode(), 0);
    QCOMPARE(QJsonDocument::fromJson(p.readAllStandardOutput()).object()["cpu"].toObject()["isa"].toString(),
             QString("generic"));
  }

  void openmp_wait_policy_is_reported() {
    // libgomp takes its wait policy from the environment when it loads; info says which one ran
    // (it decides how a 2-thread step fares on a shared CPU).
    auto policy = [](const QString& key, const QString& value) {
      QProcess p;
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.remove("OMP_WAIT_POLICY");
      env.remove("GOMP_SPINCOUNT");
      if (!key.isEmpty()) env.insert(key, value);
      p.setProcessEnvironment(env);
      p.start(SERVELAB_CLI, {"info", "--demo"});
      if (!p.waitForFinished(300000) || p.exitCode() != 0) return QString("(failed)");
      return QJsonDocument::fromJson(p.readAllStandardOutput())
          .object()["cpu"]
          .toObject()["openmp_wait_policy"]
          .toString();
    };
    QCOMPARE(policy("", ""), QString("libgomp default"));
    QCOMPARE(policy("OMP_WAIT_POLICY", "passive"), QString("passive"));
    QCOMPARE(policy("GOMP_SPINCOUNT", "1000"), QString("GOMP_SPINCOUNT"));
  }

  void tokenize_json() {
    Run r =
        cli({"tokenize", "--demo", "--json", "The quick brown fox jumped over the", "What comes up must"});
    QCOMPARE(r.code, 0);
    auto lines = json_lines(r.out);
    QCOMPARE(lines.size(), 2);
    QCOMPARE(ints(lines[0]["ids"]), (std::vector<int>{464, 2068, 7586, 21831, 11687, 625, 262}));
    QCOMPARE(lines[0]["tokens"].toArray()[1].toString(), QString("Ġquick"));
    QCOMPARE(ints(lines[1]["ids"]), (std::vector<int>{2061, 2058, 510, 1276}));
  }

  void generate_json_batch_equals_one_by_one() {
    const QStringList base = {"generate",
                              "--demo",
                              "--json",
                              "--max-new-tokens",
                              "3",
                              "--prompt",
                              "The rain in Spain falls",
                              "--prompt",
                              "What comes up must"};
    Run single = cli(base);
    Run batch = cli(base + QStringList{"--batch"});
    Run nocache = cli(base + QStringList{"--no-kv-cache"});
    QCOMPARE(single.code, 0);
    QCOMPARE(batch.code, 0);
    QCOMPARE(nocache.code, 0);
    auto a = json_lines(single.out), b = json_lines(batch.out), c = json_lines(nocache.out);
    QCOMPARE(a.size(), 2);
    QCOMPARE(b.size(), 2);
    for (int i = 0; i < 2; ++i) {
      for (const char* key : {"prompt", "prompt_ids", "generated_ids", "text", "top5", "step_ms"})
        QVERIFY2(a[i].contains(key), key);
      QCOMPARE(ints(a[i]["generated_ids"]).size(), size_t{3});
      QCOMPARE(ints(a[i]["generated_ids"]), ints(b[i]["generated_ids"]));
      QCOMPARE(ints(a[i]["generated_ids"]), ints(c[i]["generated_ids"]));
      QCOMPARE(a[i]["top5"].toArray().size(), 3);
      QCOMPARE(a[i]["top5"].toArray()[0].toArray().size(), 5);
      QCOMPARE(a[i]["step_ms"].toArray().size(), 3);
    }
    QCOMPARE(a[1]["prompt"].toString(), QString("What comes up must"));
  }

  void bench_commands_emit_json() {
    Run kv = cli({"bench", "kv-cache", "--demo", "--new-tokens", "3", "--repeats", "1", "--json"});
    QCOMPARE(kv.code, 0);
    QJsonObject k = QJsonDocument::fromJson(kv.out.toUtf8()).object();
    QCOMPARE(k["cache_ms"].toArray().size(), 3);
    QCOMPARE(k["no_cache_ms"].toArray().size(), 3);
    QCOMPARE(k["comparison"].toString(), QString("exact"));  // fp32: the same tokens both ways, checked
    QVERIFY(k["tokens_agree"].toBool());
    // Native int8 on the CPU casts each call's activations to bf16: a cache-free step and a cached
    // one may pick different tokens. The experiment reports how far they agree.
    Run q = cli({"bench", "kv-cache", "--demo", "--quant", "int8-channel", "--quant-exec", "native",
                 "--new-tokens", "24", "--repeats", "1", "--json"});
    QCOMPARE(q.code, 0);
    QJsonObject qk = QJsonDocument::fromJson(q.out.toUtf8()).object();
    QCOMPARE(qk["comparison"].toString(), QString("agreement"));
    QCOMPARE(qk["cache_tokens"].toArray().size(), 24);
    const int agree = qk["agreeing_prefix"].toInt();
    QVERIFY(agree >= 0 && agree <= 24);
    QCOMPARE(qk["tokens_agree"].toBool(), agree == 24);
    // jit-int8 rounds activations per 32 columns of a row: reported as agreement too.
    Run j = cli({"bench", "kv-cache", "--demo", "--quant", "int4-g32", "--quant-exec", "jit-int8",
                 "--new-tokens", "6", "--repeats", "1", "--json"});
    QCOMPARE(j.code, 0);
    QJsonObject jk = QJsonDocument::fromJson(j.out.toUtf8()).object();
    QCOMPARE(jk["comparison"].toString(), QString("agreement"));
    QCOMPARE(jk["engine"].toObject()["quantization"].toObject()["exec"].toString(), QString("jit-int8"));
    if (jk["engine"].toObject()["cpu"].toObject()["isa"].toString() != "generic")
      QVERIFY2(jk["engine"].toObject()["quantization"].toObject()["kernel"].toString().contains(
                   "int8 activations"),
               qPrintable(j.out));
    Run sw = cli({"bench", "batch-sweep", "--demo", "--batch-sizes", "1,2", "--new-tokens", "2", "--repeats",
                  "1", "--json"});
    QCOMPARE(sw.code, 0);
    QJsonObject s = QJsonDocument::fromJson(sw.out.toUtf8()).object();
    QCOMPARE(s["points"].toArray().size(), 2);
    QCOMPARE(s["points"].toArray()[1].toObject()["batch_size"].toInt(), 2);
  }

  void serving_benches_emit_json() {
    Run svc = cli({"bench", "sync-vs-continuous", "--demo", "--requests", "4", "--max-batch", "2",
                   "--long-every", "2", "--long-tokens", "4", "--short-tokens", "2", "--json"});
    QCOMPARE(svc.code, 0);
    QJsonObject v = QJsonDocument::fromJson(svc.out.toUtf8()).object();
    QCOMPARE(v["experiment"].toString(), QString("sync-vs-continuous"));
    QCOMPARE(v["methods"].toArray().size(), 3);
    QVERIFY(v["same_tokens"].toBool());
    for (const auto& m : v["methods"].toArray()) {
      QCOMPARE(m.toObject()["generated_tokens"].toInt(), 12);
      QVERIFY(m.toObject()["ttft_ms"].toObject().contains("p99"));
    }
    Run sb = cli({"bench", "course-benchmark", "--demo", "--queries", "3", "--new-tokens", "3", "--max-batch",
                  "2", "--json"});
    QCOMPARE(sb.code, 0);
    QJsonObject b = QJsonDocument::fromJson(sb.out.toUtf8()).object();
    QCOMPARE(b["rows"].toArray().size(), 2);
    const QJsonObject batched = b["rows"].toArray()[1].toObject();
    QCOMPARE(batched["tokens"].toInt(), 9);
    QCOMPARE(batched["max_batch"].toInt(), 2);
    for (const char* k : {"queries", "time_s", "throughput_vs_baseline", "avg_batch", "inference_calls"})
      QVERIFY2(batched.contains(k), k);
    QVERIFY(b["same_tokens"].toBool());
    // The batched run alone (for side-by-side runs against other engines): same tokens.
    Run alone = cli({"bench", "course-benchmark", "--demo", "--queries", "3", "--new-tokens", "3",
                     "--max-batch", "2", "--no-baseline", "--json"});
    QCOMPARE(alone.code, 0);
    QJsonObject a = QJsonDocument::fromJson(alone.out.toUtf8()).object();
    QCOMPARE(a["rows"].toArray().size(), 1);
    QCOMPARE(a["batched_tokens"].toArray(), b["batched_tokens"].toArray());
    QCOMPARE(a["batched_tokens"].toArray().size(), 3);
  }

  void serving_benches_print_the_course_tables() {
    Run sw = cli(
        {"bench", "batch-sweep", "--demo", "--batch-sizes", "1,2", "--new-tokens", "2", "--repeats", "1"});
    QCOMPARE(sw.code, 0);
    QVERIFY2(
        sw.out.contains("batch size") && sw.out.contains("tokens/ms") && sw.out.contains("latency ms/step"),
        qPrintable(sw.out));
    QCOMPARE(sw.out.split('\n', Qt::SkipEmptyParts).size(), 4);  // header, two sizes, caveat
    Run sb = cli(
        {"bench", "course-benchmark", "--demo", "--queries", "2", "--new-tokens", "2", "--max-batch", "2"});
    QCOMPARE(sb.code, 0);
    for (const char* col :
         {"queries", "time s", "throughput", "max batch", "avg batch", "tokens", "inference calls"})
      QVERIFY2(sb.out.contains(col), col);
    QVERIFY(sb.out.contains("baseline (one query at a time, KV cache)"));
    QVERIFY(sb.out.contains("batched (continuous, slot KV)"));
    Run svc = cli({"bench", "sync-vs-continuous", "--demo", "--requests", "3", "--max-batch", "2",
                   "--long-every", "2", "--long-tokens", "3", "--short-tokens", "1"});
    QCOMPARE(svc.code, 0);
    QVERIFY2(svc.out.contains("faster than synchronous; greedy tokens identical"), qPrintable(svc.out));
    QVERIFY(svc.out.contains("KV copied MB"));
  }

  void errors_are_one_line_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing model folder")
        << QStringList{"generate", "--model", "/nonexistent/gpt2", "--prompt", "hi"} << 1
        << "model folder /nonexistent/gpt2 not found";
    QTest::newRow("empty prompt") << QStringList{"generate", "--demo", "--prompt", ""} << 1
                                  << "prompt 1 is empty";
    QTest::newRow("prompt too long") << QStringList{"generate", "--demo",           "--prompt",
                                                    "hi",       "--max-new-tokens", "5000"}
                                     << 1 << "exceeds the context of 1024";
    QTest::newRow("bad temperature") << QStringList{"generate", "--demo",        "--prompt",
                                                    "hi",       "--temperature", "0"}
                                     << 1 << "temperature must be > 0";
    QTest::newRow("bad dtype") << QStringList{"generate", "--demo", "--prompt", "hi", "--dtype", "int3"} << 1
                               << "unknown dtype";
    QTest::newRow("bad batch size") << QStringList{"bench", "batch-sweep", "--demo", "--batch-sizes", "1,0"}
                                    << 1 << "batch size must be at least 1";
    QTest::newRow("not a number") << QStringList{"bench", "batch-sweep", "--batch-sizes", "1,x"} << 1
                                  << "not an integer";
    QTest::newRow("impossible batch")
        << QStringList{"bench", "batch-sweep", "--demo", "--batch-sizes", "500000", "--repeats", "1"} << 1
        << "GiB of memory is available";
    QTest::newRow("bad max batch") << QStringList{"bench", "sync-vs-continuous", "--demo", "--max-batch", "0"}
                                   << 1 << "max batch must be at least 1, got 0";
    QTest::newRow("request too long")
        << QStringList{"bench", "course-benchmark", "--demo", "--queries", "1", "--new-tokens", "2000"} << 1
        << "exceeds the context of 1024";
    QTest::newRow("unknown option") << QStringList{"generate", "--prompt", "hi", "--frobnicate"} << 2
                                    << "frobnicate";
    QTest::newRow("missing tokenizer")
        << QStringList{"tokenize", "--tokenizer", "/nonexistent/tok", "x"} << 1 << "/nonexistent/tok";
    QTest::newRow("no subcommand") << QStringList{} << 2 << "subcommand";
  }
  void errors_are_one_line() {
    QFETCH(QStringList, args);
    QFETCH(int, code);
    QFETCH(QString, expected);
    Run r = cli(args);
    QCOMPARE(r.code, code);
    const QString err = r.err.trimmed();
    QVERIFY2(err.contains(expected), qPrintable(err));
    QVERIFY2(!err.contains('\n'), qPrintable("more than one line: " + err));
    QVERIFY2(err.startsWith("servelab-cli: "), qPrintable(err));
  }

  void info_reports_the_builtin_smollm2() {
    if (!have_builtin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    // Without --model every command runs the built-in real model: SmolLM2-135M-Instruct from its GGUF.
    Run r = cli({"info"});
    QCOMPARE(r.code, 0);
    QJsonObject j = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(j["architecture"].toString(), QString("llama"));
    QCOMPARE(j["format"].toString(), QString("gguf"));
    QCOMPARE(j["random_weights"].toBool(), false);
    QCOMPARE(j["parameters"].toInteger(), 134515008);
    QCOMPARE(j["file_tensor_types"].toObject()["Q4_1"].toInt(), 210);
    QVERIFY(!j.contains("caveat"));
    Run demo = cli({"info", "--demo"});
    QJsonObject d = QJsonDocument::fromJson(demo.out.toUtf8()).object();
    QCOMPARE(d["architecture"].toString(), QString("gpt2"));
    QCOMPARE(d["random_weights"].toBool(), true);
  }

  void tokenize_defaults_to_the_builtin_model() {
    if (!have_builtin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    // SmolLM2's pre-tokenizer isolates every digit (docs/models.md's examples).
    Run r = cli({"tokenize", "--json", "a  1", "1 2  3   4"});
    QCOMPARE(r.code, 0);
    auto lines = json_lines(r.out);
    QCOMPARE(lines.size(), 2);
    QCOMPARE(ints(lines[0]["ids"]), (std::vector<int>{81, 256, 33}));
    QCOMPARE(ints(lines[1]["ids"]), (std::vector<int>{33, 216, 34, 256, 35, 333, 36}));
  }

  void builtin_model_writes_real_text() {
    if (!have_builtin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    // The chat-formatted course question gets a real English answer (HF's greedy text starts so).
    Run r = cli({"generate", "--max-new-tokens", "6", "--prompt",
                 "<|im_start|>user\nWhat is deep learning?<|im_end|>\n<|im_start|>assistant\n", "--json"});
    QCOMPARE(r.code, 0);
    const QJsonObject j = json_lines(r.out).at(0);
    QVERIFY2(j["text"].toString().startsWith("Deep learning is a"), qPrintable(j["text"].toString()));
  }

  // The generated text's colour is for a terminal only: a pipe (QProcess's stdout) gets no ANSI
  // escape; on a pseudo-terminal (script(1)) the colour is there unless NO_COLOR is set.
  void no_colour_codes_in_a_pipe() {
    Run r = cli({"generate", "--demo", "--prompt", "Hello", "--max-new-tokens", "3"});
    QCOMPARE(r.code, 0);
    QVERIFY2(!r.out.contains(QChar(0x1b)), qPrintable(r.out));
    QVERIFY(r.out.contains("Hello"));
  }

  void colour_on_a_terminal_unless_no_color() {
    const QString command =
        QStringLiteral("'%1' generate --demo --prompt Hello --max-new-tokens 3").arg(SERVELAB_CLI);
    const std::optional<QString> problem = servelab::test::colour_problem_on_terminal(command);
    if (!problem) QSKIP("script(1) is not installed: no pseudo-terminal to run the CLI on");
    QVERIFY2(problem->isEmpty(), qPrintable(*problem));
  }

  void help_names_the_models_it_runs() {
    Run r = cli({"--help"});
    QCOMPARE(r.code, 0);
    QVERIFY2(r.out.contains("SmolLM2") && r.out.contains("Llama"), qPrintable(r.out));
    QVERIFY2(!r.out.contains("GPT-2 generation"), qPrintable(r.out));
  }

  void lora_runs_on_the_builtin_model() {
    // LoRA follows the model's projection table: random adapters on SmolLM2's seven projections,
    // in the bench (workload "gpt2" is the engine's model, whatever its architecture) and serving.
    Run b =
        cli({"lora",           "bench", "--strategies", "segmented",  "--batch-sizes", "1", "--repeats", "1",
             "--decode-steps", "1",     "--context",    "4",          "--adapters",    "1", "--rank",    "2",
             "--new-tokens",   "2",     "--prompt",     "The sky is", "--json"});
    QVERIFY2(b.code == 0, qPrintable(b.err));
    const QJsonObject j = QJsonDocument::fromJson(b.out.toUtf8()).object();
    QCOMPARE(j["architecture"].toString(), QString("llama"));
    QCOMPARE(j["shapes"].toArray().size(), 7);
    QCOMPARE(j["shapes"].toArray()[6].toObject()["module"].toString(), QString("mlp.down_proj"));
    QCOMPARE(j["adapters"].toArray()[0].toObject()["modules"].toInt(), 30 * 7);
    QCOMPARE(j["outputs"].toArray().size(), 2);  // base and the adapter
    QVERIFY(j["strategies_agree"].toBool());
    Run s = cli({"lora", "serve", "--prompt", "The sky is", "--requests", "3", "--adapters", "2", "--rank",
                 "2", "--max-batch", "2", "--new-tokens", "2", "--base-every", "3", "--json"});
    QVERIFY2(s.code == 0, qPrintable(s.err));
    const QJsonArray reqs = QJsonDocument::fromJson(s.out.toUtf8()).object()["requests"].toArray();
    QCOMPARE(reqs.size(), 3);
    QCOMPARE(reqs[1].toObject()["adapter"].toString(), QString("rand-r2-2"));
    QCOMPARE(reqs[2].toObject()["adapter"].toString(), QString());
  }

  void chat_uses_the_models_template() {
    if (!have_builtin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    Run r =
        cli({"generate", "--chat", "--max-new-tokens", "4", "--prompt", "What is deep learning?", "--json"});
    QCOMPARE(r.code, 0);
    const QJsonObject j = json_lines(r.out).at(0);
    QCOMPARE(j["prompt"].toString(), QString("What is deep learning?"));
    QCOMPARE(
        j["chat_prompt"].toString(),
        QString(
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is deep learning?<|im_end|>\n<|im_start|>assistant\n"));
    QVERIFY2(j["text"].toString().startsWith("Deep learning"), qPrintable(j["text"].toString()));
  }

  void model_choice_errors_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("expected");
    QTest::newRow("model and demo") << QStringList{"info", "--demo", "--model", "x"} << "not both";
    QTest::newRow("not a gguf") << QStringList{"info", "--model", SERVELAB_SOURCE_DIR "/README.md"}
                                << "not a .gguf";
    QTest::newRow("no chat template")
        << QStringList{"generate", "--demo", "--chat", "--prompt", "hi"} << "no chat template";
    QTest::newRow("system without chat")
        << QStringList{"generate", "--system", "be brief", "--prompt", "hi"} << "--system needs --chat";
    QTest::newRow("context") << QStringList{"generate", "--prompt", "hi", "--max-new-tokens", "9000"}
                             << "exceeds the context of 8192";
  }
  void model_choice_errors() {
    if (!have_builtin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    QFETCH(QStringList, args);
    QFETCH(QString, expected);
    Run r = cli(args);
    QCOMPARE(r.code, 1);
    const QString err = r.err.trimmed();
    QVERIFY2(err.contains(expected) && !err.contains('\n'), qPrintable(err));
  }

  void corrupt_gguf_is_one_line() {
    QTemporaryDir tmp;
    const QString path = tmp.path() + "/broken.gguf";
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("GGUF\x03\x00\x00\x00", 8);  // v3, then nothing: truncated header
    f.close();
    Run r = cli({"info", "--model", path});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("broken.gguf") && !r.err.trimmed().contains('\n'), qPrintable(r.err));
  }

  void truncated_model_file() {
    QTemporaryDir tmp;
    Run exp = cli({"export-demo", "--out", tmp.path()});
    QCOMPARE(exp.code, 0);
    Run ok = cli({"info", "--model", tmp.path()});
    QCOMPARE(ok.code, 0);
    QCOMPARE(QJsonDocument::fromJson(ok.out.toUtf8()).object()["parameters"].toInteger(), 124439808);
    QFile f(tmp.path() + "/model.safetensors");
    QVERIFY(f.resize(f.size() / 2));
    Run bad = cli({"info", "--model", tmp.path()});
    QCOMPARE(bad.code, 1);
    QVERIFY2(bad.err.contains("truncated") && bad.err.contains("model.safetensors"), qPrintable(bad.err));
    QVERIFY(!bad.err.trimmed().contains('\n'));
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
