// Fast-path harness for a component whose ports are two-VC links rx[i] (GPU -> DUT) / tx[i] (DUT -> GPU)
// (hw/vc_link.py), with a `cfg` stream and an optional `status` output: the DySHARP switch.
//
// Template: verif/harness/fastsim/build.py (render_vc_main) fills the marked fields. Per port the C++
// models the GPU side of the link:
//   * sender: one queue per VC; traffic packets (VC from the file, joining their queue in their arrival
//     cycle) and the responder's packets (VC 1); one flit per cycle from a VC that has a flit and a credit,
//     round robin per flit between the VCs (as VcSender); LINK_CREDITS credits per VC at reset;
//   * receiver: GPU_CREDITS flits of buffer per VC; returns one credit per VC per cycle while it holds a
//     flit, except in cycles a seeded xorshift PRNG stalls that VC (probability STALL/65536); a flit
//     without a credit is a protocol error (exit 3); packets are reassembled per VC;
//   * responder, on every complete unpoisoned VC-0 packet: TLB_FILL -> TLB_FILL_RESP after FILL_LATENCY
//     cycles with the row of the GPU's first-touch layout (the rule of
//     verif/models/memory_manager.MemoryManagerSpec.serve), RED_READ -> RED_READ_RESP and READ ->
//     READ_RESP after READ_LATENCY cycles with data word(gpu, addr + 16 k) (word: see gpu_word below and
//     verif/harness/fastsim/files.vc_word). Responses leave on VC 1 in (ready cycle, creation) order.
//   * random memory latency (JITTER, header word 14; 0 = off): every response's latency is drawn uniformly
//     from [FILL_LATENCY or READ_LATENCY, that + JITTER] by a second seeded xorshift, so a GPU answers
//     different requests out of order;
//   * random sender stalls (SEND_STALL, header word 15; 0 = off): in a cycle a third xorshift idles the
//     GPU's sender (both VCs) with probability SEND_STALL/65536, so every link stalls in both directions.
//     With both words 0 no extra draw is made: a run is cycle-identical to one without these features.
//     The log ends with the stall tallies (credit-return draws and stalls, sender draws and stalls).
// Cycle structure as in credit_main.cpp: reset for three edges; the cfg words, one per edge; then per
// cycle: rising edge, drive (GPU flits and credit returns), falling edge + eval, sample. Inputs change only
// while the clock is high (between a rising edge and the next falling edge). With INPUTS_AT_RISE the
// rising edge moves after the drive (rise/fall below), nothing else.
// File formats: verif/harness/fastsim/files.py (VcTraffic, VcLog).
#include <verilated.h>
#include "V@@TOP@@.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <vector>

static constexpr int N = @@PORTS@@;
static constexpr int W = @@FLIT_WORDS@@;  // 32-bit words per flit (VlWide layout, LSB word first)
static constexpr int LAST_WORD = @@LAST_WORD@@, LAST_BIT = @@LAST_BIT@@;
static constexpr int POISON_WORD = @@POISON_WORD@@, POISON_BIT = @@POISON_BIT@@;
static constexpr int LINK_CREDITS = @@LINK_CREDITS@@, GPU_CREDITS = @@GPU_CREDITS@@;
static constexpr int CFG_WORDS = @@CFG_WORDS@@;        // 32-bit words of the cfg payload (0: no cfg port)
static constexpr int STATUS_WORDS = @@STATUS_WORDS@@;  // 32-bit words of the status output (0: none)
static constexpr int ROWS = @@ROWS@@;                  // the memory manager's index bound
// The top's inputs are registered at the rising edge (verif/harness/fastsim/build.py, registered_inputs
// with edge="posedge"): the main drives each cycle's inputs before the rising edge that starts it, so
// rise() only marks where that edge was and fall() makes it, then the falling one. Otherwise (inputs
// direct or latched on the falling edge) the main drives them after the rising edge.
static constexpr bool INPUTS_AT_RISE = @@INPUTS_AT_RISE@@;

// The optional trace (a third argument; INPUTS_AT_RISE only): per clock cycle, a line of every input but clk
// as driven for its rising edge, then a line of every output after its falling edge, one hex token per
// port in the order of verif/harness/fastsim/build.trace_ports. verif/harness/fastsim/replay.py drives
// another simulator's model of the design with the inputs and compares the outputs, cycle by cycle.
@@TRACE@@

template <class T> static inline void rise(T* top) {
    if (!INPUTS_AT_RISE) { top->clk = 1; top->eval(); }
}
template <class T> static inline void fall(T* top) {
    if (INPUTS_AT_RISE) {
        if (g_trace) trace_inputs(top);
        top->clk = 1;
        top->eval();
    }
    top->clk = 0;
    top->eval();
    if (g_trace) trace_outputs(top);
}

struct Field { int off, w; };
@@FIELDS@@
enum { OP_READ = 1, OP_READ_RESP = 2, OP_RED_READ = 7, OP_RED_READ_RESP = 8, OP_TLB_FILL = 10,
       OP_TLB_FILL_RESP = 11 };
enum { E_NONE = 0, E_ISOLATION = 9, E_OUT_OF_BOUNDS = 10, E_BUFFER_FULL = 11, E_TLB_FAULT = 15 };

struct Ports {
    CData* rx_valid[N]; CData* rx_vc[N]; WData* rx_flit[N]; CData* rx_credit[N];
    CData* tx_valid[N]; CData* tx_vc[N]; WData* tx_flit[N]; CData* tx_credit[N];
};

static void bind_ports(V@@TOP@@* t, Ports& p) {
@@BIND@@
}

static void drive_cfg(V@@TOP@@* t, const uint32_t* w, bool valid) {   // cfg payload words and valid
@@DRIVE_CFG@@
}

static void read_status(V@@TOP@@* t, uint32_t* out) {
@@READ_STATUS@@
}

static uint64_t getf(const uint32_t* w, Field f) {
    uint64_t v = 0;
    for (int b = 0; b < f.w; ++b) {
        const int q = f.off + b;
        v |= uint64_t((w[q >> 5] >> (q & 31)) & 1u) << b;
    }
    return v;
}

static void setf(uint32_t* w, Field f, uint64_t v) {
    for (int b = 0; b < f.w; ++b) {
        const int q = f.off + b;
        const uint32_t bit = 1u << (q & 31);
        if ((v >> b) & 1) w[q >> 5] |= bit; else w[q >> 5] &= ~bit;
    }
}

// verif/harness/gpu_memory.default_word (128-bit data) of flit address ((gpu + 1) << 40) ^ (addr >> 4).
static void gpu_word(int gpu, uint64_t byte_addr, uint32_t* out) {
    typedef unsigned __int128 u128;
    const u128 MIX = (u128(0x9E3779B97F4A7C15ULL) << 64) | u128(0xF39CC0605CEDC835ULL);
    const u128 a = u128((uint64_t(gpu + 1) << 40) ^ (byte_addr >> 4));
    const u128 x = (a + 1) * MIX;
    const u128 r = x ^ (x >> 61) ^ (a << 7);
    for (int k = 0; k < 4; ++k) out[k] = uint32_t(r >> (32 * k));
}

#pragma pack(push, 1)
struct RxRecord {           // one packet as received by a GPU
    int64_t first, last;    // cycles of its first and last flit
    int32_t port, vc, nflits, poison;
    int64_t flit0;          // index of its first flit in the received-flit array
};
struct TxRecord {           // one packet the responder sent
    int64_t first, last;
    int32_t port, vc, nflits, pad;
    int64_t ready;          // cycle it joined the VC-1 queue
    uint32_t head[W];
};
struct GroupCfg { int64_t group, valid, alloc, layout, base, stride; };
struct Preload { int64_t port, group, index, src; };
#pragma pack(pop)

static void die(const char* what) { std::fprintf(stderr, "fastsim: %s\n", what); std::exit(2); }

template <class T> static void read_into(FILE* f, std::vector<T>& v, size_t n) {
    v.resize(n);
    if (n && std::fread(v.data(), sizeof(T), n, f) != n) die("traffic file is truncated");
}

template <class T> static void write_all(FILE* f, const T* p, size_t n) {
    if (n && std::fwrite(p, sizeof(T), n, f) != n) die("cannot write the log file");
}

// One GPU's memory manager (MemoryManagerSpec, allocating groups first-touch, others lookup-only).
struct Layouts {
    std::map<int64_t, GroupCfg> groups;
    std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> table;  // (layout, index) -> (src, slot)
    std::map<int64_t, int64_t> bump;
    void serve(int64_t group, int64_t index, int64_t src, uint64_t& addr, int& code) {
        addr = 0;
        auto g = groups.find(group);
        if (g == groups.end() || !g->second.valid) { code = E_TLB_FAULT; return; }
        if (index >= ROWS) { code = E_OUT_OF_BOUNDS; return; }
        const GroupCfg& c = g->second;
        auto e = table.find({c.layout, index});
        int64_t slot;
        if (e != table.end()) {
            if (e->second.first != src) { code = E_ISOLATION; return; }
            slot = e->second.second;
        } else {
            if (!c.alloc) { code = E_TLB_FAULT; return; }
            slot = bump[c.layout]++;
            table[{c.layout, index}] = {src, slot};
        }
        code = E_NONE;
        addr = uint64_t(c.base + slot * c.stride * 16) & ((uint64_t(1) << 48) - 1);
    }
};

struct OutPkt { int64_t traffic, resp; };   // a traffic packet index, or a response index (traffic -1)
struct Pending {                            // a response waiting for its ready cycle
    int64_t ready, seq;
    int port;
    bool operator>(const Pending& o) const { return ready != o.ready ? ready > o.ready : seq > o.seq; }
};

int main(int argc, char** argv) {
    if (argc != 3 && argc != 4) die("usage: sim TRAFFIC LOG [TRACE]");
    if (argc == 4) {
        if (!INPUTS_AT_RISE) die("the trace needs a build that drives the inputs before the rising edge");
        g_trace = std::fopen(argv[3], "w");
        if (!g_trace) die("cannot open the trace file");
    }
    FILE* tf = std::fopen(argv[1], "rb");
    if (!tf) die("cannot open the traffic file");
    char magic[8];
    int64_t hdr[16];
    if (std::fread(magic, 1, 8, tf) != 8 || std::memcmp(magic, "DYSVTR01", 8)) die("not a VC traffic file");
    if (std::fread(hdr, sizeof(int64_t), 16, tf) != 16) die("traffic file is truncated");
    if (hdr[0] != N || hdr[1] != W) die("traffic file was written for another port count or flit width");
    const int64_t npk = hdr[2], nfl = hdr[3], run = hdr[4], ngroups = hdr[5], npre = hdr[6], ncfg = hdr[7];
    const int64_t cfg_words = hdr[8], fill_latency = hdr[9], read_latency = hdr[10], stall = hdr[11];
    uint64_t rng = uint64_t(hdr[12]) * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
    const int64_t status_period = hdr[13];
    const int64_t jitter = hdr[14], send_stall = hdr[15];
    if (jitter < 0 || send_stall < 0 || send_stall >= 65536) die("traffic file's jitter or sender stall is out of range");
    // Separate streams: the credit-stall sequence of a seed does not depend on the jitter or sender stalls.
    uint64_t rng_lat = uint64_t(hdr[12]) * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL;
    uint64_t rng_send = uint64_t(hdr[12]) * 0xA0761D6478BD642FULL + 0xE7037ED1A0B428DBULL;
    int64_t tally[4] = {};   // credit-return draws, of them stalled; sender draws, of them stalled
    auto xorshift = [](uint64_t& r) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; return r; };
    auto extra_latency = [&]() -> int64_t {
        if (!jitter) return 0;
        return int64_t((xorshift(rng_lat) >> 11) % uint64_t(jitter + 1));
    };
    if (ncfg && cfg_words != CFG_WORDS) die("traffic file's cfg words do not match the design's cfg port");
    std::vector<int64_t> arrival, first;
    std::vector<int32_t> src, vcs, nflits;
    std::vector<uint32_t> flits, cfg;
    std::vector<GroupCfg> gcfg;
    std::vector<Preload> pre;
    read_into(tf, arrival, npk);
    read_into(tf, src, npk);
    read_into(tf, vcs, npk);
    read_into(tf, first, npk);
    read_into(tf, nflits, npk);
    read_into(tf, flits, size_t(nfl) * W);
    read_into(tf, gcfg, ngroups);
    read_into(tf, pre, npre);
    read_into(tf, cfg, size_t(ncfg) * cfg_words);
    std::fclose(tf);

    std::vector<Layouts> mem(N);
    for (int i = 0; i < N; ++i)
        for (const GroupCfg& g : gcfg) mem[i].groups[g.group] = g;
    for (const Preload& q : pre) {
        uint64_t a; int c;
        if (q.port < 0 || q.port >= N) die("preload names a port that does not exist");
        mem[q.port].serve(q.group, q.index, q.src, a, c);
    }

    auto ctx = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<V@@TOP@@>(ctx.get());
    Ports p;
    std::memset(&p, 0, sizeof(p));
    bind_ports(top.get(), p);

    std::vector<int64_t> sent(npk, -1);
    std::vector<uint8_t> activity(size_t(run) * N, 0);   // bits: 0/1 GPU sent VC0/VC1, 2/3 received VC0/VC1
    std::vector<RxRecord> rxrec;
    std::vector<uint32_t> rxflits;
    std::vector<TxRecord> txrec;
    std::vector<uint32_t> respflits;                      // every response's flits, back to back
    std::vector<int64_t> respfirst, respn, respready;
    std::vector<int64_t> status_cycles;
    std::vector<uint32_t> status_words;
    std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> pending;
    std::deque<OutPkt> queue[N][2];
    int64_t offset[N][2] = {}, credits[N][2], avail[N][2], buffered[N][2] = {};
    int last_vc[N] = {};
    int ret[N][2] = {};
    std::vector<uint32_t> cur[N][2];
    int64_t cur_first[N][2] = {}, tx_open[N][2] = {};
    for (int i = 0; i < N; ++i)
        for (int v = 0; v < 2; ++v) { credits[i][v] = LINK_CREDITS; avail[i][v] = GPU_CREDITS; }

    auto sample_status = [&](int64_t cycle) {
        if (!STATUS_WORDS) return;
        status_cycles.push_back(cycle);
        const size_t at = status_words.size();
        status_words.resize(at + STATUS_WORDS);
        read_status(top.get(), &status_words[at]);
    };
    auto respond = [&](int port, const uint32_t* h, int64_t cycle) {
        const int op = int(getf(h, F_OPCODE));
        uint32_t out[W];
        std::memset(out, 0, sizeof(out));
        int64_t latency;
        int length = 0;
        uint64_t addr = 0;
        if (op == OP_TLB_FILL) {
            int code;
            mem[port].serve(int64_t(getf(h, F_DYN_GROUP)), int64_t(getf(h, F_DYN_INDEX)),
                            int64_t(getf(h, F_SRC)), addr, code);
            setf(out, F_OPCODE, OP_TLB_FILL_RESP);
            setf(out, F_SRC, port);
            setf(out, F_TAG, getf(h, F_TAG));
            setf(out, F_UNI_DST, port);
            setf(out, F_UNI_CODE, code);
            setf(out, F_UNI_ADDR, addr);
            latency = fill_latency + extra_latency();
        } else if (op == OP_RED_READ || op == OP_READ) {
            length = int(getf(h, F_LENGTH));
            addr = getf(h, F_UNI_ADDR);
            setf(out, F_OPCODE, op == OP_RED_READ ? OP_RED_READ_RESP : OP_READ_RESP);
            setf(out, F_SRC, port);
            setf(out, F_TAG, getf(h, F_TAG));
            setf(out, F_LENGTH, length);
            if (op == OP_RED_READ) {
                setf(out, F_ETYPE, getf(h, F_ETYPE));
                setf(out, F_REDOP, getf(h, F_REDOP));
            }
            setf(out, F_UNI_DST, getf(h, F_SRC));
            setf(out, F_UNI_XTAG, getf(h, F_UNI_XTAG));
            latency = read_latency + extra_latency();
        } else {
            return;
        }
        const int64_t idx = int64_t(respfirst.size());
        respfirst.push_back(int64_t(respflits.size() / W));
        respn.push_back(1 + length);
        if (!length) out[LAST_WORD] |= 1u << LAST_BIT;
        respflits.insert(respflits.end(), out, out + W);
        for (int k = 0; k < length; ++k) {
            uint32_t f[W];
            std::memset(f, 0, sizeof(f));
            gpu_word(port, addr + 16 * uint64_t(k), f);
            if (k == length - 1) f[LAST_WORD] |= 1u << LAST_BIT;
            respflits.insert(respflits.end(), f, f + W);
        }
        respready.push_back(cycle + latency);
        pending.push(Pending{cycle + latency, idx, port});
    };

    top->clk = 0;
    top->rst = 1;
    for (int i = 0; i < N; ++i) { *p.rx_valid[i] = 0; *p.tx_credit[i] = 0; }
@@ZERO_INPUTS@@
    top->eval();
    // Every input changes only while the clock is high, as cocotb's Cycler changes rst: a top whose inputs
    // are latched on the falling edge (verif/harness/fastsim/build.py, registered_inputs) sees at every
    // rising edge what one without sees. rst falls after the third rising edge; the configuration writes
    // follow, one per rising edge (cfg is always ready), each driven after the edge before it. With
    // INPUTS_AT_RISE that edge is made after the drive instead (in fall()): the inputs then change while
    // the clock is low, and the top's input registers delay them by the edge.
    for (int k = 0; k < 3; ++k) {
        rise(top.get());
        if (k == 2) {
            top->rst = 0;
            if (ncfg) drive_cfg(top.get(), &cfg[0], true);
        }
        fall(top.get());
    }
    for (int64_t k = 0; k < ncfg; ++k) {
        rise(top.get());
        if (k + 1 < ncfg) drive_cfg(top.get(), &cfg[size_t(k + 1) * cfg_words], true);
        else drive_cfg(top.get(), nullptr, false);
        fall(top.get());
    }

    auto t0 = std::chrono::steady_clock::now();
    timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    int64_t next = 0;
    for (int64_t cycle = 1; cycle <= run; ++cycle) {
        rise(top.get());
        while (next < npk && arrival[next] <= cycle) {
            queue[src[next]][vcs[next]].push_back(OutPkt{next, -1});
            ++next;
        }
        while (!pending.empty() && pending.top().ready <= cycle) {
            const Pending q = pending.top();
            pending.pop();
            queue[q.port][1].push_back(OutPkt{-1, q.seq});
        }
        uint8_t* act = &activity[size_t(cycle - 1) * N];
        for (int i = 0; i < N; ++i) {
            if (send_stall) {
                ++tally[2];
                if (int64_t(xorshift(rng_send) >> 48) < send_stall) { ++tally[3]; *p.rx_valid[i] = 0; continue; }
            }
            bool can[2];
            for (int v = 0; v < 2; ++v) can[v] = !queue[i][v].empty() && credits[i][v] > 0;
            int v = -1;
            if (can[0] || can[1]) v = can[1 - last_vc[i]] ? 1 - last_vc[i] : last_vc[i];
            if (v < 0) { *p.rx_valid[i] = 0; continue; }
            OutPkt& o = queue[i][v].front();
            const uint32_t* f;
            int64_t n;
            if (o.traffic >= 0) {
                f = &flits[size_t(first[o.traffic] + offset[i][v]) * W];
                n = nflits[o.traffic];
                if (offset[i][v] == 0) sent[o.traffic] = cycle;
            } else {
                f = &respflits[size_t(respfirst[o.resp] + offset[i][v]) * W];
                n = respn[o.resp];
                if (offset[i][v] == 0) {
                    TxRecord r;
                    r.first = cycle; r.last = -1; r.port = i; r.vc = v; r.nflits = int32_t(n); r.pad = 0;
                    r.ready = respready[o.resp];
                    std::memcpy(r.head, f, sizeof(r.head));
                    txrec.push_back(r);
                    tx_open[i][v] = int64_t(txrec.size()) - 1;
                }
            }
            std::memcpy(p.rx_flit[i], f, W * sizeof(uint32_t));
            *p.rx_valid[i] = 1;
            *p.rx_vc[i] = uint8_t(v);
            --credits[i][v];
            last_vc[i] = v;
            act[i] |= uint8_t(1 << v);
            if (++offset[i][v] == n) {
                if (o.traffic < 0) txrec[size_t(tx_open[i][v])].last = cycle;
                offset[i][v] = 0;
                queue[i][v].pop_front();
            }
        }
        for (int j = 0; j < N; ++j) {
            uint8_t c = 0;
            for (int v = 0; v < 2; ++v) {
                bool stalled = false;
                if (stall) {
                    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                    stalled = int64_t(rng >> 48) < stall;
                    ++tally[0];
                    tally[1] += stalled;
                }
                ret[j][v] = (buffered[j][v] > 0 && !stalled) ? 1 : 0;
                c |= uint8_t(ret[j][v] << (2 * v));
            }
            *p.tx_credit[j] = c;
        }
        fall(top.get());
        for (int i = 0; i < N; ++i) {
            const uint8_t c = *p.rx_credit[i];
            credits[i][0] += c & 3;
            credits[i][1] += (c >> 2) & 3;
        }
        for (int j = 0; j < N; ++j) {
            if (*p.tx_valid[j]) {
                const int v = *p.tx_vc[j] & 1;
                if (avail[j][v] <= 0) {
                    std::fprintf(stderr, "fastsim: tx[%d] sent a VC-%d flit without a credit at cycle %lld\n", j,
                                 v, (long long)cycle);
                    return 3;
                }
                --avail[j][v];
                ++buffered[j][v];
                act[j] |= uint8_t(4 << v);
                const uint32_t* f = p.tx_flit[j];
                std::vector<uint32_t>& b = cur[j][v];
                if (b.empty()) cur_first[j][v] = cycle;
                b.insert(b.end(), f, f + W);
                if ((f[LAST_WORD] >> LAST_BIT) & 1) {
                    RxRecord r;
                    r.first = cur_first[j][v]; r.last = cycle; r.port = j; r.vc = v;
                    r.nflits = int32_t(b.size() / W);
                    r.poison = int32_t((f[POISON_WORD] >> POISON_BIT) & 1);
                    r.flit0 = int64_t(rxflits.size() / W);
                    rxrec.push_back(r);
                    rxflits.insert(rxflits.end(), b.begin(), b.end());
                    if (v == 0 && !r.poison) respond(j, b.data(), cycle);
                    b.clear();
                }
            }
            for (int v = 0; v < 2; ++v)
                if (ret[j][v]) { buffered[j][v] -= ret[j][v]; avail[j][v] += ret[j][v]; }
        }
        if (status_period > 0 && cycle % status_period == 0) sample_status(cycle);
    }
    sample_status(run + 1);   // the end state (sampled after the last cycle's falling edge)
    const int64_t loop_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    const int64_t cpu_ns = (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec);
    top->final();

    // Responses still waiting (for their ready cycle or in a queue) at the end: counted, not logged.
    int64_t unsent = int64_t(pending.size());
    for (int i = 0; i < N; ++i) unsent += int64_t(queue[i][1].size());
    FILE* lf = std::fopen(argv[2], "wb");
    if (!lf) die("cannot open the log file");
    const int64_t lh[12] = {N, W, npk, int64_t(rxrec.size()), int64_t(txrec.size()), int64_t(rxflits.size() / W),
                            run, STATUS_WORDS, int64_t(status_cycles.size()), loop_ns, cpu_ns, unsent};
    write_all(lf, "DYSVLG01", 8);
    write_all(lf, lh, 12);
    write_all(lf, sent.data(), sent.size());
    write_all(lf, activity.data(), activity.size());
    write_all(lf, rxrec.data(), rxrec.size());
    write_all(lf, rxflits.data(), rxflits.size());
    write_all(lf, txrec.data(), txrec.size());
    write_all(lf, status_cycles.data(), status_cycles.size());
    write_all(lf, status_words.data(), status_words.size());
    write_all(lf, tally, 4);
    if (std::fclose(lf)) die("cannot write the log file");
    if (g_trace && std::fclose(g_trace)) die("cannot write the trace file");
    return 0;
}
