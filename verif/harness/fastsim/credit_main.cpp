// Fast-path harness for a component whose ports are credit links rx[i] (in) / tx[j] (out).
//
// Template: verif/harness/fastsim/build.py fills the marked fields (top module, port count, flit words,
// flag bit positions, port bindings). The behaviour mirrors the cocotb agents in verif/harness/credit.py,
// cycle for cycle, so that both harnesses give identical logs on the same traffic:
//   * reset: rst high for three rising edges (lowered after the third, while the clock is high), inputs
//     zero; cycle 1 is the first edge after reset;
//   * each cycle: rising edge; drive (packets arriving this cycle join their source queue, each source
//     sends its next flit while it holds a credit, each sink returns one credit per buffered flit) and
//     falling edge, settled by one eval (the design has no negedge logic); sample (credits returned by
//     rx, flits on tx);
//   * sources: unbounded queue, flits back to back while credits last (CreditSource, no gaps);
//   * sinks: return one credit per cycle per buffered flit (CreditSink, batch 1), with an optional
//     per-port stall pattern indexed by cycle; a flit without credit is a protocol error (exit 3).
// File formats: verif/harness/fastsim/files.py.
#include <verilated.h>
#include "V@@TOP@@.h"

#include <chrono>
#include <cstdint>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

static constexpr int N = @@PORTS@@;
static constexpr int W = @@FLIT_WORDS@@;  // 32-bit words per flit (VlWide layout, LSB word first)
static constexpr int LAST_WORD = @@LAST_WORD@@, LAST_BIT = @@LAST_BIT@@;
static constexpr int POISON_WORD = @@POISON_WORD@@, POISON_BIT = @@POISON_BIT@@;
static constexpr int IN_CREDITS = @@IN_CREDITS@@, OUT_CREDITS = @@OUT_CREDITS@@;

struct Ports {
    CData* rx_valid[N]; WData* rx_flit[N]; CData* rx_credit[N];
    CData* tx_valid[N]; WData* tx_flit[N]; CData* tx_credit[N];
};

static void bind_ports(V@@TOP@@* t, Ports& p) {
@@BIND@@
}

#pragma pack(push, 1)
struct Record {             // one packet as delivered on one tx port
    int64_t first, last;    // cycles of its first and last flit
    int32_t port, nflits, poison, pad;
    uint64_t hash;          // FNV-1a 64 over every 32-bit word of every flit
    uint32_t head[W];       // the first flit
};
#pragma pack(pop)

static void die(const char* what) { std::fprintf(stderr, "fastsim: %s\n", what); std::exit(2); }

template <class T> static void read_into(FILE* f, std::vector<T>& v, size_t n) {
    v.resize(n);
    if (n && std::fread(v.data(), sizeof(T), n, f) != n) die("traffic file is truncated");
}

template <class T> static void write_all(FILE* f, const T* p, size_t n) {
    if (n && std::fwrite(p, sizeof(T), n, f) != n) die("cannot write the log file");
}

// The optional trace (a third argument): per clock cycle, a line of every input but clk as driven while the
// clock is high, then a line of every output after the falling edge, one hex token per port in the order of
// verif/harness/fastsim/build.trace_ports (verif/harness/fastsim/replay.py replays it on another model).
@@TRACE@@

template <class T> static inline void fall(T* top) {   // the falling edge, traced
    if (g_trace) trace_inputs(top);
    top->clk = 0;
    top->eval();
    if (g_trace) trace_outputs(top);
}

int main(int argc, char** argv) {
    if (argc != 3 && argc != 4) die("usage: sim TRAFFIC LOG [TRACE]");
    if (argc == 4 && !(g_trace = std::fopen(argv[3], "w"))) die("cannot open the trace file");
    FILE* tf = std::fopen(argv[1], "rb");
    if (!tf) die("cannot open the traffic file");
    char magic[8];
    int64_t hdr[7];  // ports, flit words, packets, flits, run cycles, stall period, reserved
    if (std::fread(magic, 1, 8, tf) != 8 || std::memcmp(magic, "DYSTRF01", 8)) die("not a traffic file");
    if (std::fread(hdr, sizeof(int64_t), 7, tf) != 7) die("traffic file is truncated");
    if (hdr[0] != N || hdr[1] != W) die("traffic file was written for another port count or flit width");
    const int64_t npk = hdr[2], nfl = hdr[3], run = hdr[4], period = hdr[5];
    std::vector<int64_t> arrival, first;
    std::vector<int32_t> src, nflits;
    std::vector<uint32_t> flits;
    std::vector<uint8_t> stall;
    read_into(tf, arrival, npk);
    read_into(tf, src, npk);
    read_into(tf, first, npk);
    read_into(tf, nflits, npk);
    read_into(tf, flits, size_t(nfl) * W);
    read_into(tf, stall, size_t(period) * N);  // stall[(cycle % period) * N + port]: no credit return
    std::fclose(tf);

    auto ctx = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<V@@TOP@@>(ctx.get());
    Ports p;
    bind_ports(top.get(), p);

    std::vector<int64_t> sent(npk, -1);
    std::vector<uint8_t> delivered(size_t(run) * N, 0);
    std::vector<Record> records;
    std::deque<int64_t> queue[N];
    int64_t offset[N] = {0}, credits[N], available[N], to_return[N] = {0};
    int returning[N] = {0};
    Record cur[N];
    bool in_packet[N] = {false};
    for (int i = 0; i < N; ++i) { credits[i] = IN_CREDITS; available[i] = OUT_CREDITS; }

    top->clk = 0;
    top->rst = 1;
    for (int i = 0; i < N; ++i) { *p.rx_valid[i] = 0; *p.tx_credit[i] = 0; }
@@ZERO_INPUTS@@
    top->eval();
    // rst falls while the clock is high, as cocotb's Cycler does: a top whose reset is latched on the falling
    // edge (verif/harness/fastsim/build.py, registered_reset) sees it at every rising edge as one without.
    for (int k = 0; k < 3; ++k) { top->clk = 1; top->eval(); if (k == 2) top->rst = 0; fall(top.get()); }

    auto t0 = std::chrono::steady_clock::now();
    timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    int64_t next = 0;
    for (int64_t cycle = 1; cycle <= run; ++cycle) {
        top->clk = 1;
        top->eval();
        while (next < npk && arrival[next] <= cycle) { queue[src[next]].push_back(next); ++next; }
        for (int i = 0; i < N; ++i) {
            if (!queue[i].empty() && credits[i] > 0) {
                const int64_t pk = queue[i].front();
                std::memcpy(p.rx_flit[i], &flits[size_t(first[pk] + offset[i]) * W], W * sizeof(uint32_t));
                *p.rx_valid[i] = 1;
                --credits[i];
                if (offset[i] == 0) sent[pk] = cycle;
                if (++offset[i] == nflits[pk]) { offset[i] = 0; queue[i].pop_front(); }
            } else {
                *p.rx_valid[i] = 0;
            }
        }
        const uint8_t* st = period ? &stall[size_t(cycle % period) * N] : nullptr;
        for (int j = 0; j < N; ++j) {
            returning[j] = (to_return[j] && !(st && st[j])) ? 1 : 0;
            *p.tx_credit[j] = returning[j];
        }
        fall(top.get());
        for (int i = 0; i < N; ++i) credits[i] += *p.rx_credit[i];
        for (int j = 0; j < N; ++j) {
            if (*p.tx_valid[j]) {
                if (available[j] <= 0) {
                    std::fprintf(stderr, "fastsim: tx[%d] sent a flit without a credit at cycle %lld\n", j,
                                 (long long)cycle);
                    return 3;
                }
                --available[j];
                ++to_return[j];
                delivered[size_t(cycle - 1) * N + j] = 1;
                const WData* f = p.tx_flit[j];
                Record& r = cur[j];
                if (!in_packet[j]) {
                    in_packet[j] = true;
                    r.first = cycle;
                    r.port = j;
                    r.nflits = 0;
                    r.poison = 0;
                    r.pad = 0;
                    r.hash = 1469598103934665603ULL;
                    std::memcpy(r.head, f, W * sizeof(uint32_t));
                }
                for (int w = 0; w < W; ++w) { r.hash ^= f[w]; r.hash *= 1099511628211ULL; }
                ++r.nflits;
                r.poison |= (f[POISON_WORD] >> POISON_BIT) & 1;
                if ((f[LAST_WORD] >> LAST_BIT) & 1) {
                    r.last = cycle;
                    records.push_back(r);
                    in_packet[j] = false;
                }
            }
            if (returning[j]) { to_return[j] -= returning[j]; available[j] += returning[j]; }
        }
    }
    const int64_t loop_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    const int64_t cpu_ns = (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec);
    top->final();

    FILE* lf = std::fopen(argv[2], "wb");
    if (!lf) die("cannot open the log file");
    const int64_t lh[7] = {N, W, npk, int64_t(records.size()), run, loop_ns, cpu_ns};
    write_all(lf, "DYSLOG01", 8);
    write_all(lf, lh, 7);
    write_all(lf, sent.data(), sent.size());
    write_all(lf, delivered.data(), delivered.size());
    write_all(lf, records.data(), records.size());
    if (std::fclose(lf)) die("cannot write the log file");
    if (g_trace && std::fclose(g_trace)) die("cannot write the trace file");
    return 0;
}
