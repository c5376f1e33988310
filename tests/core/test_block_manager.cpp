// The paged KV block manager alone: thousands of random allocate/append/fork/free operations keep
// every invariant (reference counts equal table occurrences, no block owned twice where it may be
// written, a simulated KV content that sharing never corrupts, everything back at the end), and
// prefix caching hits exactly the blocks it should, never across adapters, evicting LRU.
#include <QtTest>
#include <map>
#include <random>

#include "generate/block_manager.h"
#include "test_support.h"

using namespace servelab;

namespace {

// What a cached position holds: a fingerprint of the adapter and every token up to it, as keys
// and values depend on exactly those.
uint64_t fingerprint(int64_t adapter, const std::vector<int32_t>& tokens, size_t upto) {
  uint64_t h = 1469598103934665603ULL ^ static_cast<uint64_t>(adapter);
  for (size_t i = 0; i <= upto; ++i) h = (h ^ static_cast<uint64_t>(tokens[i] + 7)) * 1099511628211ULL;
  return h;
}

std::vector<int32_t> seq_of(int64_t n, int32_t start) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(start + static_cast<int32_t>(i));
  return t;
}

}  // namespace

class TestBlockManager : public QObject {
  Q_OBJECT

  struct Shadow {
    std::vector<int32_t> tokens;
    int64_t adapter = 0;
  };

  // Every invariant of the manager against the test's own record of the sequences and of what
  // each block position was last written with.
  static void check(const BlockManager& m, const std::map<int64_t, Shadow>& seqs,
                    const std::vector<std::vector<uint64_t>>& content) {
    std::vector<int64_t> refs(static_cast<size_t>(m.num_blocks()), 0);
    QCOMPARE(m.sequences().size(), seqs.size());
    for (const auto& [id, s] : seqs) {
      const std::vector<int64_t>& table = m.block_table(id);
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      QCOMPARE(m.length(id), n);
      QCOMPARE(static_cast<int64_t>(table.size()), m.blocks_for(n));
      for (size_t i = 0; i < table.size(); ++i) {
        QVERIFY(table[i] >= 0 && table[i] < m.num_blocks());
        QVERIFY2(std::count(table.begin(), table.end(), table[i]) == 1, "a block twice in one table");
        ++refs[static_cast<size_t>(table[i])];
      }
      // A partial last block is written next: it must be this sequence's alone.
      if (n % m.block_size() != 0) QCOMPARE(m.ref_count(table.back()), int64_t{1});
      for (int64_t p = 0; p < n; ++p)
        QVERIFY2(content[static_cast<size_t>(table[static_cast<size_t>(p / m.block_size())])]
                        [static_cast<size_t>(p % m.block_size())] ==
                     fingerprint(s.adapter, s.tokens, static_cast<size_t>(p)),
                 qPrintable(QString("sequence %1 position %2 holds another's KV").arg(id).arg(p)));
    }
    int64_t unreferenced = 0;
    for (int64_t b = 0; b < m.num_blocks(); ++b) {
      QCOMPARE(m.ref_count(b), refs[static_cast<size_t>(b)]);
      unreferenced += refs[static_cast<size_t>(b)] == 0 ? 1 : 0;
    }
    QCOMPARE(m.available_blocks(), unreferenced);
    QCOMPARE(m.used_blocks(), m.num_blocks() - unreferenced);
    for (int64_t b : m.eviction_order()) {
      QCOMPARE(m.ref_count(b), int64_t{0});
      QVERIFY(m.is_cached(b));
    }
    if (!m.prefix_caching()) QCOMPARE(m.cached_unused_blocks(), int64_t{0});
  }

 private Q_SLOTS:
  void random_operations_keep_invariants_data() {
    QTest::addColumn<bool>("caching");
    QTest::addColumn<int>("block_size");
    QTest::newRow("prefix caching, blocks of 4") << true << 4;
    QTest::newRow("prefix caching, blocks of 1") << true << 1;
    QTest::newRow("no caching, blocks of 3") << false << 3;
  }
  void random_operations_keep_invariants() {
    QFETCH(bool, caching);
    QFETCH(int, block_size);
    std::mt19937 rng(1234 + block_size);
    auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    BlockManager m(40, block_size, caching);
    std::map<int64_t, Shadow> seqs;
    std::vector<std::vector<uint64_t>> content(40, std::vector<uint64_t>(static_cast<size_t>(block_size), 0));
    auto write = [&](int64_t id, int64_t from) {
      const Shadow& s = seqs.at(id);
      const std::vector<int64_t>& table = m.block_table(id);
      for (size_t p = static_cast<size_t>(from); p < s.tokens.size(); ++p)
        content[static_cast<size_t>(table[p / static_cast<size_t>(block_size)])]
               [p % static_cast<size_t>(block_size)] = fingerprint(s.adapter, s.tokens, p);
    };
    int64_t next_id = 0, allocations = 0, refusals = 0, hits = 0, forks = 0, appends = 0, full = 0;
    for (int op = 0; op < 6000; ++op) {
      const int64_t kind = pick(0, 9);
      if (kind <= 2 || seqs.empty()) {
        // Prompts from a few shared stems, so that prefixes repeat.
        Shadow s;
        s.adapter = pick(0, 3) == 0 ? 1 : 0;
        const int32_t stem = static_cast<int32_t>(pick(0, 2));
        s.tokens = seq_of(pick(0, 3) * block_size, stem * 100);
        for (int64_t i = pick(1, 2 * block_size + 1); i > 0; --i)
          s.tokens.push_back(static_cast<int32_t>(pick(0, 4)));
        const int64_t expect_hit = m.cached_prefix_blocks(s.tokens, s.adapter) * block_size;
        const int64_t id = next_id++;
        const std::optional<int64_t> cached = m.allocate(id, s.tokens, s.adapter);
        if (!cached) {
          ++refusals;
          QVERIFY(m.blocks_for(static_cast<int64_t>(s.tokens.size())) > m.available_blocks());
          QVERIFY(!m.has(id));
          continue;
        }
        ++allocations;
        QCOMPARE(*cached, expect_hit);
        QVERIFY(*cached < static_cast<int64_t>(s.tokens.size()));
        hits += *cached > 0 ? 1 : 0;
        seqs[id] = s;
        write(id, *cached);  // the prefill computes only the uncached suffix
      } else if (kind <= 6) {
        auto it = std::next(seqs.begin(), pick(0, static_cast<int64_t>(seqs.size()) - 1));
        const int32_t token = static_cast<int32_t>(pick(0, 4));
        const bool needs_block = static_cast<int64_t>(it->second.tokens.size()) % block_size == 0;
        const int64_t before = m.available_blocks();
        if (m.append(it->first, token)) {
          ++appends;
          it->second.tokens.push_back(token);
          write(it->first, static_cast<int64_t>(it->second.tokens.size()) - 1);
        } else {
          ++full;
          QVERIFY(needs_block && before == 0);
        }
      } else if (kind == 7) {
        auto it = std::next(seqs.begin(), pick(0, static_cast<int64_t>(seqs.size()) - 1));
        const bool partial = static_cast<int64_t>(it->second.tokens.size()) % block_size != 0;
        if (partial && m.available_blocks() == 0) continue;
        const int64_t id = next_id++;
        const auto copy = m.fork(it->first, id);
        QCOMPARE(copy.has_value(), partial);
        if (copy) content[static_cast<size_t>(copy->second)] = content[static_cast<size_t>(copy->first)];
        seqs[id] = it->second;
        ++forks;
      } else {
        auto it = std::next(seqs.begin(), pick(0, static_cast<int64_t>(seqs.size()) - 1));
        m.free(it->first);
        seqs.erase(it);
      }
      check(m, seqs, content);
      if (QTest::currentTestFailed()) QFAIL(qPrintable(QString("after operation %1").arg(op)));
    }
    // The sequences exercised every path.
    QVERIFY(allocations > 500 && refusals > 0 && forks > 100 && appends > 1000 && full > 0);
    if (caching) QVERIFY(hits > 100);
    for (const auto& [id, s] : seqs) m.free(id);
    seqs.clear();
    check(m, seqs, content);
    QCOMPARE(m.available_blocks(), int64_t{40});
    QCOMPARE(m.used_blocks(), int64_t{0});
    if (!caching) QCOMPARE(m.free_blocks(), int64_t{40});
  }

  void identical_and_partial_prompts_hit() {
    BlockManager m(32, 4, true);
    const std::vector<int32_t> a = seq_of(10, 0);  // two full blocks and two tokens
    QCOMPARE(m.allocate(0, a, 0), std::optional<int64_t>(0));
    QCOMPARE(m.allocate(1, a, 0), std::optional<int64_t>(8));
    QCOMPARE(m.block_table(1)[0], m.block_table(0)[0]);
    QCOMPARE(m.block_table(1)[1], m.block_table(0)[1]);
    QVERIFY(m.block_table(1)[2] != m.block_table(0)[2]);  // the partial block is never shared
    QCOMPARE(m.ref_count(m.block_table(0)[0]), int64_t{2});
    // Exactly three blocks: the last token must still be computed, so only two hit.
    QCOMPARE(m.allocate(2, seq_of(12, 0), 0), std::optional<int64_t>(8));
    // Shares the first 6 tokens: one full block.
    std::vector<int32_t> b = seq_of(6, 0);
    b.insert(b.end(), {90, 91, 92, 93, 94});
    QCOMPARE(m.allocate(3, b, 0), std::optional<int64_t>(4));
    // Same tokens after a different first block: nothing (the hash chains the prefix).
    std::vector<int32_t> c = seq_of(10, 0);
    c[1] = 77;
    QCOMPARE(m.allocate(4, c, 0), std::optional<int64_t>(0));
    QCOMPARE(m.hit_tokens(), int64_t{8 + 8 + 4});
    QCOMPARE(m.lookup_tokens(), int64_t{10 + 10 + 12 + 11 + 10});
    // Blocks filled by decoding are cached too.
    std::vector<int32_t> d = seq_of(3, 500);
    QCOMPARE(m.allocate(5, d, 0), std::optional<int64_t>(0));
    for (int32_t t : {503, 504, 505, 506, 507}) QVERIFY(m.append(5, t));
    QCOMPARE(m.allocate(6, seq_of(9, 500), 0), std::optional<int64_t>(8));
  }

  void differing_adapter_never_shares() {
    BlockManager m(16, 4, true);
    const std::vector<int32_t> a = seq_of(9, 0);
    QCOMPARE(m.allocate(0, a, 0), std::optional<int64_t>(0));
    QCOMPARE(m.allocate(1, a, 1), std::optional<int64_t>(0));
    QCOMPARE(m.allocate(2, a, 2), std::optional<int64_t>(0));
    QCOMPARE(m.allocate(3, a, 1), std::optional<int64_t>(8));
    for (size_t i = 0; i < 2; ++i) {
      QVERIFY(m.block_table(1)[i] != m.block_table(0)[i]);
      QVERIFY(m.block_table(2)[i] != m.block_table(1)[i]);
      QCOMPARE(m.block_table(3)[i], m.block_table(1)[i]);
    }
  }

  void unused_cached_blocks_are_kept_and_evicted_lru() {
    BlockManager m(8, 2, true);
    const std::vector<int32_t> x = seq_of(5, 0), y = seq_of(5, 100);  // 3 blocks each, 2 full
    QVERIFY(m.allocate(0, x, 0));
    QVERIFY(m.allocate(1, y, 0));
    const std::vector<int64_t> tx = m.block_table(0), ty = m.block_table(1);
    m.free(0);
    m.free(1);
    // Full blocks stay cached, the tail of each sequence first in line; partial blocks are free.
    QCOMPARE(m.eviction_order(), (std::vector<int64_t>{tx[1], tx[0], ty[1], ty[0]}));
    QCOMPARE(m.free_blocks(), int64_t{4});
    QCOMPARE(m.available_blocks(), int64_t{8});
    // Reusing y's prefix takes its blocks out of the LRU list.
    QCOMPARE(m.allocate(2, y, 0), std::optional<int64_t>(4));
    QCOMPARE(m.eviction_order(), (std::vector<int64_t>{tx[1], tx[0]}));
    // A new 9-token prompt needs 5 blocks: 3 free ones, then x's tail block, then its head.
    QCOMPARE(m.allocate(3, seq_of(9, 300), 0), std::optional<int64_t>(0));
    QCOMPARE(m.evictions(), int64_t{2});
    QVERIFY(m.eviction_order().empty());
    QCOMPARE(m.cached_prefix_blocks(x, 0), int64_t{0});
    m.free(2);
    m.free(3);
    QCOMPARE(m.cached_prefix_blocks(y, 0), int64_t{2});
    // Too big for the pool: refused, nothing changes.
    QCOMPARE(m.allocate(4, seq_of(17, 900), 0), std::optional<int64_t>());
    QVERIFY(!m.has(4));
    QCOMPARE(m.available_blocks(), int64_t{8});
  }

  void uncomputed_blocks_are_not_kept_cached() {
    // A request preempted after append() made room for a position its decode never wrote: the
    // block that position completes must not be offered to later prompts.
    BlockManager m(8, 2, true);
    QVERIFY(m.allocate(0, {1, 2, 3}, 0));
    QVERIFY(m.append(0, 4));  // block 1 is now full and hashed, position 3 not yet computed
    const int64_t tail = m.block_table(0)[1];
    QVERIFY(m.is_cached(tail));
    m.free(0, 3);
    QVERIFY(!m.is_cached(tail));
    QCOMPARE(m.eviction_order().size(), size_t{1});  // the first block, fully computed, stays
    QCOMPARE(m.cached_prefix_blocks({1, 2, 3, 4, 5}, 0), int64_t{1});
  }

  void bad_arguments_are_named() {
    QVERIFY(QString::fromStdString(test::error_of(ErrorKind::Input, [] {
              BlockManager(0, 16, true);
            })).contains("at least 1 block"));
    QVERIFY(QString::fromStdString(test::error_of(ErrorKind::Input, [] {
              BlockManager(4, 0, true);
            })).contains("block size"));
    BlockManager m(4, 2, true);
    QVERIFY(m.allocate(0, {1, 2, 3}, 0));
    QVERIFY(QString::fromStdString(test::error_of(ErrorKind::Input, [&] {
              m.allocate(0, {1}, 0);
            })).contains("already holds"));
    QVERIFY(QString::fromStdString(test::error_of(ErrorKind::Input, [&] {
              m.block_table(9);
            })).contains("sequence 9 holds no KV blocks"));
  }
};

QTEST_GUILESS_MAIN(TestBlockManager)
#include "test_block_manager.moc"
