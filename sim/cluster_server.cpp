// The Verilator backend's simulator: the verilated cluster, its clock and a request loop.
//
// Built by nicoll.sim.verilator_backend together with a generated header,
// nicoll_cluster_ports.h, which names the node count, the device-memory row width and each
// node's top-level ports (see NICOLL_NODE_PORTS below).  The clock is toggled here, in C++;
// the Python driver sends one request per transaction (a register access, a memory burst, a
// number of idle cycles) over a pipe and sleeps until the answer, so Python never runs per
// clock edge.  Every wait for the gateware has a cycle budget: a bus that never answers is
// reported, never waited on forever.
//
// Requests (little endian): u8 op, u32 node, u64 a, u64 b, u64 c, u32 n, then n bytes.
// Replies: u8 status (0 ok, 1 error), u64 v0, u64 v1, u32 n, then n bytes (the data, or the
// error text).  The ops and their arguments are listed in the OP_* constants below and in
// nicoll.sim.verilator_backend, which speaks this protocol.
//
// Ref: AMBA AXI and ACE Protocol Specification (IHI0022E), A3.2 (handshake: a transfer takes
// place at the rising edge where VALID and READY are both high), A3.4 (INCR bursts of at most
// 256 beats that do not cross a 4 KiB boundary), A3.4.3 (write strobes).

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include <unistd.h>

#include "verilated.h"
#include "verilated_vpi.h"
#include "Vnicoll_cluster.h"
#include "nicoll_cluster_ports.h"

#if VM_TRACE
#include "verilated_vcd_c.h"
#endif

namespace {

enum Op : uint8_t {
    OP_READ32 = 1,      // a address -> v0 data, v1 response
    OP_WRITE32 = 2,     // a address, b data, c strobe -> v0 response
    OP_MEM_WRITE = 3,   // a address, bytes -> v0 response (worst of the bursts)
    OP_MEM_READ = 4,    // a address, b length -> bytes, v1 response (worst of the beats)
    OP_MEM_LOAD = 5,    // a address, bytes: straight into the memory array, no clock
    OP_MEM_DUMP = 6,    // a address, b length -> bytes, straight from the memory array
    OP_IDLE = 7,        // a cycles: run with no bus traffic -> v0 cycles since reset
    OP_TRACE_START = 8, // record every node's activity lanes from now on
    OP_TRACE_STOP = 9,  // -> records of u8 node, u8 lane, u64 first, u64 end (engine cycles)
    OP_CYCLES = 10,     // -> v0 cycles since reset, v1 node 0's engine cycle counter
    OP_CLOSE = 11,
    OP_RESET = 12,      // hold the cluster's reset a few cycles, as at power-on (memories keep
                        // their contents) -> v0 cycles since the simulation started
    OP_FAULTS_SET = 13, // bytes: the fault injectors' configuration port (builds with faults)
    OP_FAULTS_GET = 14, // -> bytes of the links' counters port (builds with faults)
};

//! Cycles one bus handshake may wait before the request fails: far more than any handshake
//! of the gateware takes, far less than a host-side budget.
constexpr uint64_t HANDSHAKE_BUDGET = 1u << 20;
constexpr int RESET_CYCLES = 4;
constexpr uint64_t AXI_BOUNDARY = 4096;
constexpr unsigned AXI_MAX_BEATS = 256;
constexpr unsigned LANES = 3;       // send, receive, reduce: the order of NICOLL_LANE_NAMES

struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

//! A port of the verilated model: its storage (CData .. VlWide) read and written as bytes.
struct Port {
    void* data;
    size_t size;

    uint64_t get() const {
        uint64_t v = 0;
        std::memcpy(&v, data, size < 8 ? size : 8);
        return v;
    }
    void set(uint64_t v) const {
        if (size <= 8) {
            std::memcpy(data, &v, size);
        } else {
            std::memset(data, 0, size);
            std::memcpy(data, &v, 8);
        }
    }
    void get_bytes(uint8_t* out, size_t n) const { std::memcpy(out, data, n); }
    void set_bytes(const uint8_t* in, size_t n) const {
        std::memset(data, 0, size);
        std::memcpy(data, in, n);
    }
};

#define NICOLL_PORT(x) Port{static_cast<void*>(&(x)), sizeof(x)}
// Verilator spells the "__" of a port name "___05F" in C++ (n0_s_axil__awaddr becomes
// n0_s_axil___05Fawaddr).
#define NICOLL_L(t, i, name) NICOLL_PORT(t.n##i##_s_axil___05F##name)
#define NICOLL_M(t, i, name) NICOLL_PORT(t.n##i##_s_axi___05F##name)
//! Node i's ports of the model ``t``, in the order of NodePorts' members.  The generated
//! header's NICOLL_BIND_NODES(array, model) uses it once per node.
#define NICOLL_NODE_PORTS(t, i) NodePorts{ \
    NICOLL_L(t, i, awaddr), NICOLL_L(t, i, awprot), NICOLL_L(t, i, awvalid), \
    NICOLL_L(t, i, awready), NICOLL_L(t, i, wdata), NICOLL_L(t, i, wstrb), \
    NICOLL_L(t, i, wvalid), NICOLL_L(t, i, wready), NICOLL_L(t, i, bresp), \
    NICOLL_L(t, i, bvalid), NICOLL_L(t, i, bready), NICOLL_L(t, i, araddr), \
    NICOLL_L(t, i, arprot), NICOLL_L(t, i, arvalid), NICOLL_L(t, i, arready), \
    NICOLL_L(t, i, rdata), NICOLL_L(t, i, rresp), NICOLL_L(t, i, rvalid), \
    NICOLL_L(t, i, rready), \
    NICOLL_M(t, i, awid), NICOLL_M(t, i, awaddr), NICOLL_M(t, i, awlen), \
    NICOLL_M(t, i, awsize), NICOLL_M(t, i, awburst), NICOLL_M(t, i, awlock), \
    NICOLL_M(t, i, awcache), NICOLL_M(t, i, awprot), NICOLL_M(t, i, awqos), \
    NICOLL_M(t, i, awvalid), NICOLL_M(t, i, awready), NICOLL_M(t, i, wdata), \
    NICOLL_M(t, i, wstrb), NICOLL_M(t, i, wlast), NICOLL_M(t, i, wvalid), \
    NICOLL_M(t, i, wready), NICOLL_M(t, i, bid), NICOLL_M(t, i, bresp), \
    NICOLL_M(t, i, bvalid), NICOLL_M(t, i, bready), NICOLL_M(t, i, arid), \
    NICOLL_M(t, i, araddr), NICOLL_M(t, i, arlen), NICOLL_M(t, i, arsize), \
    NICOLL_M(t, i, arburst), NICOLL_M(t, i, arlock), NICOLL_M(t, i, arcache), \
    NICOLL_M(t, i, arprot), NICOLL_M(t, i, arqos), NICOLL_M(t, i, arvalid), \
    NICOLL_M(t, i, arready), NICOLL_M(t, i, rid), NICOLL_M(t, i, rdata), \
    NICOLL_M(t, i, rresp), NICOLL_M(t, i, rlast), NICOLL_M(t, i, rvalid), \
    NICOLL_M(t, i, rready), \
    NICOLL_PORT(t.n##i##_activity)}

struct NodePorts {
    // AXI4-Lite register port.
    Port l_awaddr, l_awprot, l_awvalid, l_awready, l_wdata, l_wstrb, l_wvalid, l_wready,
        l_bresp, l_bvalid, l_bready, l_araddr, l_arprot, l_arvalid, l_arready, l_rdata,
        l_rresp, l_rvalid, l_rready;
    // AXI4 device-memory port.
    Port awid, awaddr, awlen, awsize, awburst, awlock, awcache, awprot, awqos, awvalid,
        awready, wdata, wstrb, wlast, wvalid, wready, bid, bresp, bvalid, bready, arid,
        araddr, arlen, arsize, arburst, arlock, arcache, arprot, arqos, arvalid, arready, rid,
        rdata, rresp, rlast, rvalid, rready;
    // Activity lanes (bit k: lane k moved a beat in this cycle) for traces.
    Port activity;
};

class Cluster {
  public:
    Cluster(const char* waves) : ctx_(new VerilatedContext), top_(new Vnicoll_cluster{ctx_.get()}) {
        NICOLL_BIND_NODES(nodes_, (*top_));
        now_ = NICOLL_PORT(top_->cycles);
#if VM_TRACE
        if (waves && *waves) {
            ctx_->traceEverOn(true);
            vcd_.reset(new VerilatedVcdC);
            top_->trace(vcd_.get(), 99);
            vcd_->open(waves);
        }
#else
        (void)waves;
#endif
        for (int k = 0; k < NICOLL_NODES; ++k) {
            std::string path = std::string("TOP.nicoll_cluster.node") + std::to_string(k)
                               + ".core.devmem.mem";
            vpiHandle h = vpi_handle_by_name(const_cast<char*>(path.c_str()), nullptr);
            if (!h) throw Failure("no memory array " + path + " in the model");
            memories_.push_back(h);
        }
        top_->clk = 0;
        reset();
    }

    //! Hold rst for RESET_CYCLES cycles and let one go by after it.  The harness drives no
    //! bus between requests, so every request starts with the buses idle.
    void reset() {
        top_->rst = 1;
        top_->eval();
        for (int i = 0; i < RESET_CYCLES; ++i) tick();
        top_->rst = 0;
        tick();
    }

#ifdef NICOLL_FAULTS
    void faults_set(const uint8_t* bytes, size_t n) {
        Port config = NICOLL_PORT(top_->fault_config);
        if (n > config.size)
            throw Failure("fault configuration of " + std::to_string(n) + " bytes; the port "
                          "holds " + std::to_string(config.size));
        config.set_bytes(bytes, n);
        top_->eval();
    }

    std::vector<uint8_t> faults_get() {
        top_->eval();
        Port counters = NICOLL_PORT(top_->fault_counters);
        std::vector<uint8_t> out(counters.size);
        counters.get_bytes(out.data(), out.size());
        return out;
    }
#else
    void faults_set(const uint8_t*, size_t) {
        throw Failure("this cluster was built without fault injection (faults=False)");
    }
    std::vector<uint8_t> faults_get() {
        throw Failure("this cluster was built without fault injection (faults=False)");
    }
#endif

    ~Cluster() {
#if VM_TRACE
        if (vcd_) vcd_->close();
#endif
        top_->final();
    }

    uint64_t cycles() const { return cycle_; }
    uint64_t engine_cycles() { top_->eval(); return now_.get(); }

    //! One clock cycle.  The rising edge takes the inputs as they are now (Verilator settles
    //! input changes before it applies the edge), so a caller evaluates first only when it
    //! must read what the gateware answers before the edge (ready, valid, data).
    void tick() {
        if (tracing_) {
            top_->eval();
            sample();
        }
#if VM_TRACE
        if (vcd_) vcd_->dump(ctx_->time());
#endif
        top_->clk = 1;
        top_->eval();
        ctx_->timeInc(5);
#if VM_TRACE
        if (vcd_) vcd_->dump(ctx_->time());
#endif
        top_->clk = 0;
        top_->eval();
        ctx_->timeInc(5);
        ++cycle_;
    }

    void idle(uint64_t n) {
        for (uint64_t i = 0; i < n; ++i) tick();
    }

    uint64_t read32(int node, uint64_t address, uint64_t& response) {
        const NodePorts& p = nodes_[node];
        p.l_araddr.set(address & ~uint64_t(3));
        p.l_arprot.set(0);
        p.l_arvalid.set(1);
        p.l_rready.set(1);
        bool address_taken = false;
        for (uint64_t budget = HANDSHAKE_BUDGET; budget; --budget) {
            top_->eval();
            bool ar = !address_taken && p.l_arready.get();
            bool r = address_taken && p.l_rvalid.get();
            uint64_t data = p.l_rdata.get(), resp = p.l_rresp.get();
            tick();
            if (ar) {
                address_taken = true;
                p.l_arvalid.set(0);
            }
            if (r) {
                p.l_rready.set(0);
                response = resp;
                return data;
            }
        }
        p.l_arvalid.set(0);
        p.l_rready.set(0);
        throw Failure("node " + std::to_string(node) + ": no AXI4-Lite read response within "
                      + std::to_string(HANDSHAKE_BUDGET) + " cycles");
    }

    uint64_t write32(int node, uint64_t address, uint64_t data, uint64_t strobe) {
        const NodePorts& p = nodes_[node];
        p.l_awaddr.set(address & ~uint64_t(3));
        p.l_awprot.set(0);
        p.l_awvalid.set(1);
        p.l_wdata.set(data);
        p.l_wstrb.set(strobe);
        p.l_wvalid.set(1);
        p.l_bready.set(1);
        bool aw_done = false, w_done = false;
        for (uint64_t budget = HANDSHAKE_BUDGET; budget; --budget) {
            top_->eval();
            bool aw = !aw_done && p.l_awready.get();
            bool w = !w_done && p.l_wready.get();
            bool b = aw_done && w_done && p.l_bvalid.get();
            uint64_t resp = p.l_bresp.get();
            tick();
            if (aw) { aw_done = true; p.l_awvalid.set(0); }
            if (w) { w_done = true; p.l_wvalid.set(0); }
            if (b) {
                p.l_bready.set(0);
                return resp;
            }
        }
        p.l_awvalid.set(0);
        p.l_wvalid.set(0);
        p.l_bready.set(0);
        throw Failure("node " + std::to_string(node) + ": no AXI4-Lite write response within "
                      + std::to_string(HANDSHAKE_BUDGET) + " cycles");
    }

    //! Bytes [address, address + n) written over the AXI4 port in INCR bursts of full-width
    //! beats; bytes outside the range are masked by the strobes.  Returns the worst response.
    uint64_t mem_write(int node, uint64_t address, const uint8_t* bytes, uint64_t n) {
        uint64_t worst = 0;
        for_each_burst(address, n, [&](uint64_t first_row, unsigned beats) {
            worst = std::max(worst, write_burst(node, first_row, beats, address, bytes, n));
        });
        return worst;
    }

    uint64_t mem_read(int node, uint64_t address, uint8_t* out, uint64_t n) {
        uint64_t worst = 0;
        for_each_burst(address, n, [&](uint64_t first_row, unsigned beats) {
            worst = std::max(worst, read_burst(node, first_row, beats, address, out, n));
        });
        return worst;
    }

    //! Backdoor: rows of node ``node``'s memory array, written in no simulated time.  A row
    //! only partly covered keeps its other bytes.
    void mem_load(int node, uint64_t address, const uint8_t* bytes, uint64_t n) {
        std::vector<uint8_t> row(ROW_BYTES);
        for (uint64_t r = address / ROW_BYTES; n && r * ROW_BYTES < address + n; ++r) {
            uint64_t base = r * ROW_BYTES;
            uint64_t lo = std::max(address, base), hi = std::min(address + n, base + ROW_BYTES);
            if (lo != base || hi != base + ROW_BYTES) get_row(node, r, row.data());
            std::memcpy(row.data() + (lo - base), bytes + (lo - address), hi - lo);
            put_row(node, r, row.data());
        }
    }

    void mem_dump(int node, uint64_t address, uint8_t* out, uint64_t n) {
        std::vector<uint8_t> row(ROW_BYTES);
        for (uint64_t r = address / ROW_BYTES; n && r * ROW_BYTES < address + n; ++r) {
            uint64_t base = r * ROW_BYTES;
            uint64_t lo = std::max(address, base), hi = std::min(address + n, base + ROW_BYTES);
            get_row(node, r, row.data());
            std::memcpy(out + (lo - address), row.data() + (lo - base), hi - lo);
        }
    }

    void trace_start() {
        tracing_ = true;
        records_.clear();
        for (auto& open : open_) open = NOT_OPEN;
    }

    //! Stop recording; return the spans as (node, lane, first, end) in engine cycles.
    std::vector<uint8_t> trace_stop() {
        uint64_t end = engine_cycles();
        for (int k = 0; k < NICOLL_NODES; ++k)
            for (unsigned lane = 0; lane < LANES; ++lane)
                if (open_[k * LANES + lane] != NOT_OPEN) {
                    record(k, lane, open_[k * LANES + lane], end);
                    open_[k * LANES + lane] = NOT_OPEN;
                }
        tracing_ = false;
        std::vector<uint8_t> out;
        out.swap(records_);
        return out;
    }

  private:
    static constexpr uint64_t ROW_BYTES = NICOLL_ROW_BYTES;
    static constexpr uint64_t NOT_OPEN = ~uint64_t(0);

    template <typename F>
    void for_each_burst(uint64_t address, uint64_t n, F&& burst) {
        if (!n) return;
        uint64_t row = address / ROW_BYTES, last = (address + n - 1) / ROW_BYTES;
        while (row <= last) {
            uint64_t to_boundary = (AXI_BOUNDARY - (row * ROW_BYTES) % AXI_BOUNDARY) / ROW_BYTES;
            uint64_t beats = std::min<uint64_t>({last - row + 1, AXI_MAX_BEATS, to_boundary});
            burst(row, static_cast<unsigned>(beats));
            row += beats;
        }
    }

    void start_address(const NodePorts& p, bool write, uint64_t row, unsigned beats) {
        unsigned size = __builtin_ctzll(ROW_BYTES);
        if (write) {
            p.awid.set(0); p.awaddr.set(row * ROW_BYTES); p.awlen.set(beats - 1);
            p.awsize.set(size); p.awburst.set(1); p.awlock.set(0); p.awcache.set(0);
            p.awprot.set(0); p.awqos.set(0); p.awvalid.set(1);
        } else {
            p.arid.set(0); p.araddr.set(row * ROW_BYTES); p.arlen.set(beats - 1);
            p.arsize.set(size); p.arburst.set(1); p.arlock.set(0); p.arcache.set(0);
            p.arprot.set(0); p.arqos.set(0); p.arvalid.set(1);
        }
    }

    //! The bytes of beat ``row`` that fall in [address, address + n), and their strobes.
    void beat_of(uint64_t row, uint64_t address, const uint8_t* bytes, uint64_t n,
                 uint8_t* data, uint8_t* strobe) {
        std::memset(data, 0, ROW_BYTES);
        std::memset(strobe, 0, (ROW_BYTES + 7) / 8);
        uint64_t base = row * ROW_BYTES;
        for (uint64_t k = 0; k < ROW_BYTES; ++k) {
            uint64_t at = base + k;
            if (at >= address && at < address + n) {
                data[k] = bytes[at - address];
                strobe[k / 8] |= uint8_t(1u << (k % 8));
            }
        }
    }

    uint64_t write_burst(int node, uint64_t first_row, unsigned beats, uint64_t address,
                         const uint8_t* bytes, uint64_t n) {
        const NodePorts& p = nodes_[node];
        std::vector<uint8_t> data(ROW_BYTES), strobe((ROW_BYTES + 7) / 8);
        start_address(p, true, first_row, beats);
        unsigned sent = 0;
        auto load_beat = [&]() {
            beat_of(first_row + sent, address, bytes, n, data.data(), strobe.data());
            p.wdata.set_bytes(data.data(), ROW_BYTES);
            p.wstrb.set_bytes(strobe.data(), strobe.size());
            p.wlast.set(sent + 1 == beats);
            p.wvalid.set(1);
        };
        load_beat();
        p.bready.set(1);
        bool aw_done = false;
        for (uint64_t budget = HANDSHAKE_BUDGET; budget; --budget) {
            top_->eval();
            bool aw = !aw_done && p.awready.get();
            bool w = sent < beats && p.wready.get();
            bool b = sent == beats && p.bvalid.get();
            uint64_t resp = p.bresp.get();
            tick();
            if (aw) { aw_done = true; p.awvalid.set(0); }
            if (w) {
                ++sent;
                if (sent < beats) load_beat(); else p.wvalid.set(0);
            }
            if (b) {
                p.bready.set(0);
                return resp;
            }
        }
        p.awvalid.set(0); p.wvalid.set(0); p.bready.set(0);
        throw Failure("node " + std::to_string(node) + ": an AXI4 write burst did not complete "
                      "within " + std::to_string(HANDSHAKE_BUDGET) + " cycles");
    }

    uint64_t read_burst(int node, uint64_t first_row, unsigned beats, uint64_t address,
                        uint8_t* out, uint64_t n) {
        const NodePorts& p = nodes_[node];
        std::vector<uint8_t> data(ROW_BYTES);
        start_address(p, false, first_row, beats);
        p.rready.set(1);
        bool ar_done = false;
        unsigned got = 0;
        uint64_t worst = 0;
        for (uint64_t budget = HANDSHAKE_BUDGET; budget; --budget) {
            top_->eval();
            bool ar = !ar_done && p.arready.get();
            bool r = p.rvalid.get();
            if (r) {
                p.rdata.get_bytes(data.data(), ROW_BYTES);
                worst = std::max(worst, p.rresp.get());
                uint64_t base = (first_row + got) * ROW_BYTES;
                for (uint64_t k = 0; k < ROW_BYTES; ++k)
                    if (base + k >= address && base + k < address + n)
                        out[base + k - address] = data[k];
            }
            tick();
            if (ar) { ar_done = true; p.arvalid.set(0); }
            if (r && ++got == beats) {
                p.rready.set(0);
                return worst;
            }
        }
        p.arvalid.set(0); p.rready.set(0);
        throw Failure("node " + std::to_string(node) + ": an AXI4 read burst did not complete "
                      "within " + std::to_string(HANDSHAKE_BUDGET) + " cycles");
    }

    void get_row(int node, uint64_t row, uint8_t* out) {
        vpiHandle h = row_handle(node, row);
        s_vpi_value value{};
        value.format = vpiVectorVal;
        vpi_get_value(h, &value);
        for (uint64_t w = 0; w < ROW_BYTES / 4; ++w) {
            uint32_t word = value.value.vector[w].aval;
            std::memcpy(out + 4 * w, &word, 4);
        }
        vpi_release_handle(h);
    }

    void put_row(int node, uint64_t row, const uint8_t* in) {
        vpiHandle h = row_handle(node, row);
        std::vector<s_vpi_vecval> words(ROW_BYTES / 4);
        for (uint64_t w = 0; w < ROW_BYTES / 4; ++w) {
            std::memcpy(&words[w].aval, in + 4 * w, 4);
            words[w].bval = 0;
        }
        s_vpi_value value{};
        value.format = vpiVectorVal;
        value.value.vector = words.data();
        vpi_put_value(h, &value, nullptr, vpiNoDelay);
        vpi_release_handle(h);
    }

    vpiHandle row_handle(int node, uint64_t row) {
        vpiHandle h = vpi_handle_by_index(memories_[node], static_cast<PLI_INT32>(row));
        if (!h) throw Failure("node " + std::to_string(node) + ": no memory row "
                              + std::to_string(row));
        return h;
    }

    void sample() {
        uint64_t now = now_.get();
        for (int k = 0; k < NICOLL_NODES; ++k) {
            uint64_t bits = nodes_[k].activity.get();
            for (unsigned lane = 0; lane < LANES; ++lane) {
                uint64_t& open = open_[k * LANES + lane];
                bool on = bits >> lane & 1;
                if (on && open == NOT_OPEN) {
                    open = now;
                } else if (!on && open != NOT_OPEN) {
                    record(k, lane, open, now);
                    open = NOT_OPEN;
                }
            }
        }
    }

    void record(int node, unsigned lane, uint64_t first, uint64_t end) {
        uint8_t raw[18];
        raw[0] = uint8_t(node);
        raw[1] = uint8_t(lane);
        std::memcpy(raw + 2, &first, 8);
        std::memcpy(raw + 10, &end, 8);
        records_.insert(records_.end(), raw, raw + sizeof raw);
    }

    std::unique_ptr<VerilatedContext> ctx_;
    std::unique_ptr<Vnicoll_cluster> top_;
#if VM_TRACE
    std::unique_ptr<VerilatedVcdC> vcd_;
#endif
    NodePorts nodes_[NICOLL_NODES];
    Port now_{};
    std::vector<vpiHandle> memories_;
    uint64_t cycle_ = 0;
    bool tracing_ = false;
    uint64_t open_[NICOLL_NODES * LANES] = {};
    std::vector<uint8_t> records_;
};

void read_exact(int fd, void* buf, size_t n) {
    auto* p = static_cast<uint8_t*>(buf);
    while (n) {
        ssize_t got = ::read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) throw std::runtime_error("closed");
        p += got;
        n -= static_cast<size_t>(got);
    }
}

void write_exact(int fd, const void* buf, size_t n) {
    auto* p = static_cast<const uint8_t*>(buf);
    while (n) {
        ssize_t put = ::write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) throw std::runtime_error("closed");
        p += put;
        n -= static_cast<size_t>(put);
    }
}

#pragma pack(push, 1)
struct Request {
    uint8_t op;
    uint32_t node;
    uint64_t a, b, c;
    uint32_t n;
};
struct Reply {
    uint8_t status;
    uint64_t v0, v1;
    uint32_t n;
};
#pragma pack(pop)

void reply(int fd, uint8_t status, uint64_t v0, uint64_t v1, const void* data, size_t n) {
    Reply r{status, v0, v1, static_cast<uint32_t>(n)};
    write_exact(fd, &r, sizeof r);
    if (n) write_exact(fd, data, n);
}

}  // namespace

int main(int argc, char** argv) {
    // argv: request fd, reply fd, VCD path or "" (waves need a build with tracing).
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s REQUEST_FD REPLY_FD [VCD]\n", argv[0]);
        return 2;
    }
    int in = std::atoi(argv[1]), out = std::atoi(argv[2]);
    std::unique_ptr<Cluster> cluster;
    try {
        cluster.reset(new Cluster(argc > 3 ? argv[3] : ""));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "nicoll cluster simulator: %s\n", e.what());
        return 1;
    }
    std::vector<uint8_t> payload, data;
    try {
        for (;;) {
            Request q;
            read_exact(in, &q, sizeof q);
            payload.resize(q.n);
            if (q.n) read_exact(in, payload.data(), q.n);
            bool cluster_wide = q.op == OP_CLOSE || q.op == OP_IDLE || q.op == OP_CYCLES
                                || q.op == OP_TRACE_START || q.op == OP_TRACE_STOP
                                || q.op == OP_RESET || q.op == OP_FAULTS_SET
                                || q.op == OP_FAULTS_GET;
            if (!cluster_wide && q.node >= NICOLL_NODES) {
                std::string text = "node " + std::to_string(q.node) + " outside the cluster";
                reply(out, 1, 0, 0, text.data(), text.size());
                continue;
            }
            try {
                uint64_t response = 0;
                switch (q.op) {
                case OP_READ32: {
                    uint64_t value = cluster->read32(q.node, q.a, response);
                    reply(out, 0, value, response, nullptr, 0);
                    break;
                }
                case OP_WRITE32:
                    reply(out, 0, cluster->write32(q.node, q.a, q.b, q.c), 0, nullptr, 0);
                    break;
                case OP_MEM_WRITE:
                    reply(out, 0, cluster->mem_write(q.node, q.a, payload.data(), q.n), 0,
                          nullptr, 0);
                    break;
                case OP_MEM_READ:
                    data.assign(q.b, 0);
                    response = cluster->mem_read(q.node, q.a, data.data(), q.b);
                    reply(out, 0, 0, response, data.data(), data.size());
                    break;
                case OP_MEM_LOAD:
                    cluster->mem_load(q.node, q.a, payload.data(), q.n);
                    reply(out, 0, 0, 0, nullptr, 0);
                    break;
                case OP_MEM_DUMP:
                    data.assign(q.b, 0);
                    cluster->mem_dump(q.node, q.a, data.data(), q.b);
                    reply(out, 0, 0, 0, data.data(), data.size());
                    break;
                case OP_IDLE:
                    cluster->idle(q.a);
                    reply(out, 0, cluster->cycles(), 0, nullptr, 0);
                    break;
                case OP_TRACE_START:
                    cluster->trace_start();
                    reply(out, 0, 0, 0, nullptr, 0);
                    break;
                case OP_TRACE_STOP:
                    data = cluster->trace_stop();
                    reply(out, 0, 0, 0, data.data(), data.size());
                    break;
                case OP_CYCLES:
                    reply(out, 0, cluster->cycles(), cluster->engine_cycles(), nullptr, 0);
                    break;
                case OP_RESET:
                    cluster->reset();
                    reply(out, 0, cluster->cycles(), 0, nullptr, 0);
                    break;
                case OP_FAULTS_SET:
                    cluster->faults_set(payload.data(), q.n);
                    reply(out, 0, 0, 0, nullptr, 0);
                    break;
                case OP_FAULTS_GET:
                    data = cluster->faults_get();
                    reply(out, 0, 0, 0, data.data(), data.size());
                    break;
                case OP_CLOSE:
                    reply(out, 0, 0, 0, nullptr, 0);
                    return 0;
                default: {
                    std::string text = "unknown request " + std::to_string(q.op);
                    reply(out, 1, 0, 0, text.data(), text.size());
                }
                }
            } catch (const Failure& e) {
                std::string text = e.what();
                reply(out, 1, 0, 0, text.data(), text.size());
            }
        }
    } catch (const std::runtime_error&) {
        return 0;       // the driver closed the pipe: nothing left to answer
    }
}
