// The session store degrades instead of failing: a corrupt file is moved aside and a fresh store
// made; a read-only file or folder, a store locked by another process, a write or COMMIT that
// fails (a file-size limit) turn it off with one warning, and the assembler goes on from memory.
// Forks share their prefix in memory: many edits of the last turn of a long chat cost only the
// edited turns, and the cache's accounted bytes stay under its bound.
//
// A disk that fills up or turns read-only while the gateway runs is a real one: a 512 KiB tmpfs
// (ENOSPC: SQLITE_FULL) and a small ext4 image mounted errors=remount-ro whose error is then
// triggered (the kernel makes it read-only under the open store: EROFS on the next write). Both
// need root (mount); as root a mount that is refused fails the test, as another user it is skipped.
//
// The read-only cases run in a child process as an unprivileged user when the tests run as root
// (root writes read-only files); the size limit and the lock holder are child processes too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "../../bench/gateway_needles.h"
#include "context_test_util.h"
#include "gateway/context/context_assembler.h"
#include "gateway/context/session.h"
#include "gateway/context/session_store.h"
#include "test_util.h"

namespace strata::gateway {
namespace {

using test_helpers::paragraph;
using test_helpers::rough_count;

Conversation fault_chat(uint64_t seed, int turns) {
    bench::needles::Gen g(seed);
    Conversation c;
    c.system = "You remember things.";
    for (int t = 0; t < turns; ++t) {
        c.messages.push_back({"user", paragraph(g, 3), true});
        c.messages.push_back({"assistant", paragraph(g, 6), false});
    }
    c.messages.push_back({"user", "What did I say first?", true});
    return c;
}

constexpr int kNobody = 65534;

TEST(GatewayStoreFaults, CorruptFileMovedAsideAndAFreshStoreMade) {
    test::TempDir dir;
    const auto path = dir / "s.db";
    std::string junk(64 << 10, '\0');
    std::mt19937 rng(7);
    for (char& ch : junk) ch = static_cast<char>(rng());
    std::ofstream(path, std::ios::binary) << junk;
    strata::test::LogLines w;
    SessionStore store({.path = path, .log = w.sink()});
    EXPECT_TRUE(store.available());
    ASSERT_EQ(w.lines.size(), 1u);
    EXPECT_NE(w.lines[0].find("moved aside"), std::string::npos) << w.lines[0];
    int aside = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
        if (e.path().filename().string().rfind("s.db.corrupt-", 0) == 0) {
            ++aside;
            EXPECT_EQ(std::filesystem::file_size(e.path()), junk.size());
        }
    EXPECT_EQ(aside, 1);
    // The fresh store works, and the damage is told once however many requests follow.
    ContextAssembler a(&store, rough_count);
    const Conversation c = fault_chat(1, 60);
    EXPECT_TRUE(a.assemble("k", c, {.budget_tokens = 2000}).abridged);
    EXPECT_EQ(store.n_sessions(), 1);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(a.assemble("k", fault_chat(20 + i, 60), {.budget_tokens = 2000}).abridged);
    EXPECT_TRUE(a.assemble("k", c, {.budget_tokens = 2000}).stats.session_hit);
    EXPECT_TRUE(store.available());
    EXPECT_EQ(store.n_sessions(), 6);
    EXPECT_EQ(w.lines.size(), 1u);
}

TEST(GatewayStoreFaults, ReadOnlyFileOrFolderMeansMemoryOnly) {
    test::TempDir dir;
    ::chmod(dir.path().c_str(), 0777);
    const auto ro_file = dir / "ro.db";
    {
        SessionStore made({.path = ro_file});
        ASSERT_TRUE(made.available());
    }
    ::chmod(ro_file.c_str(), 0444);
    const auto ro_dir = dir / "ro-dir";
    std::filesystem::create_directories(ro_dir);
    {
        SessionStore made({.path = ro_dir / "s.db"});
        ASSERT_TRUE(made.available());
    }
    ::chmod((ro_dir / "s.db").c_str(), 0666);
    ::chmod(ro_dir.c_str(), 0555);
    const int uid = ::geteuid() == 0 ? kNobody : -1;
    const int status = strata::test::run_in_child(uid, [&] {
        for (const auto& path : {ro_file, ro_dir / "s.db", std::filesystem::path("/proc/strata-no-such/s.db")}) {
            strata::test::LogLines w;
            SessionStore store({.path = path, .log = w.sink()});
            if (store.available()) return 1;
            if (w.lines.size() != 1 || w.lines[0].find("memory only") == std::string::npos) return 2;
            ContextAssembler a(&store, rough_count);
            const Conversation c = fault_chat(2, 60);
            if (!a.assemble("k", c, {.budget_tokens = 2000}).abridged) return 3;
            if (!a.assemble("k", c, {.budget_tokens = 2000}).stats.session_hit) return 4;  // from memory
            if (w.lines.size() != 1) return 5;
        }
        return 0;
    });
    EXPECT_EQ(status, 0);
}

TEST(GatewayStoreFaults, LockedByAnotherProcessMeansMemoryOnlyAtOnce) {
    test::TempDir dir;
    const auto path = dir / "s.db";
    { SessionStore made({.path = path}); }
    int ready[2], release[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(release), 0);
    const pid_t holder = ::fork();
    if (holder == 0) {
        sqlite3* db = nullptr;
        sqlite3_open(path.c_str(), &db);
        const int rc =
            sqlite3_exec(db, "BEGIN EXCLUSIVE; INSERT INTO sessions VALUES(99, 'x', 0, 0, 0);", nullptr, nullptr, nullptr);
        const char ok = rc == SQLITE_OK ? 'y' : 'n';
        [[maybe_unused]] ssize_t n = ::write(ready[1], &ok, 1);
        char c;
        n = ::read(release[0], &c, 1);
        ::_exit(0);
    }
    char ok = 0;
    ASSERT_EQ(::read(ready[0], &ok, 1), 1);
    ASSERT_EQ(ok, 'y');
    strata::test::LogLines w;
    const auto t0 = std::chrono::steady_clock::now();
    SessionStore store({.path = path, .log = w.sink()});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(store.available());
    EXPECT_LT(s, 5.0) << "a locked store must not hold a request for long";
    ASSERT_EQ(w.lines.size(), 1u);
    EXPECT_NE(w.lines[0].find("locked"), std::string::npos) << w.lines[0];
    ContextAssembler a(&store, rough_count);
    EXPECT_TRUE(a.assemble("k", fault_chat(3, 60), {.budget_tokens = 2000}).abridged);
    [[maybe_unused]] ssize_t n = ::write(release[1], "x", 1);
    ::waitpid(holder, nullptr, 0);
}

TEST(GatewayStoreFaults, AFailedWriteOrCommitTurnsTheStoreOffOnce) {
    test::TempDir dir;
    const auto path = dir / "s.db";
    // A file-size limit (as `ulimit -f`): writes past it fail with EFBIG (SIGXFSZ ignored, as the
    // gateway does) — the store must say so once and the assembler go on answering from memory.
    const int status = strata::test::run_in_child(-1, [&] {
        ::signal(SIGXFSZ, SIG_IGN);
        strata::test::LogLines w;
        SessionStore store({.path = path, .log = w.sink()});
        if (!store.available()) return 1;
        const rlimit limit{256 << 10, 256 << 10};
        if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
        ContextAssembler a(&store, rough_count);
        int answered = 0;
        for (int i = 0; i < 40; ++i)
            if (a.assemble("k", fault_chat(100 + i, 60), {.budget_tokens = 2000}).abridged) ++answered;
        if (answered != 40) return 3;
        if (store.available()) return 4;  // 40 chats do not fit in 256 KiB
        if (w.lines.size() != 1 || w.lines[0].find("memory only") == std::string::npos) return 5;
        // Later conversations still work from memory, with no more warnings.
        const Conversation c = fault_chat(7, 60);
        a.assemble("k", c, {.budget_tokens = 2000});
        if (!a.assemble("k", c, {.budget_tokens = 2000}).stats.session_hit) return 6;
        return w.lines.size() == 1 ? 0 : 7;
    });
    EXPECT_EQ(status, 0);
}

TEST(GatewayStoreFaults, AStaleSharedMemoryFileIsNeverMapped) {
    test::TempDir dir;
    const auto path = dir / "s.db";
    {
        SessionStore made({.path = path});
        ContextAssembler a(&made, rough_count);
        a.assemble("k", fault_chat(4, 60), {.budget_tokens = 2000});
    }
    // A one-byte, read-only -shm (what a crashed process or a full disk leaves): mapping it is
    // a SIGBUS. The exclusive WAL store never maps one.
    std::ofstream(path.string() + "-shm") << "x";
    ::chmod((path.string() + "-shm").c_str(), 0444);
    const int status = strata::test::run_in_child(-1, [&] {
        SessionStore store({.path = path});
        ContextAssembler a(&store, rough_count);
        const Conversation c = fault_chat(4, 60);
        if (!a.assemble("k", c, {.budget_tokens = 2000}).stats.session_hit) return 1;  // found in the file
        return store.available() ? 0 : 2;
    });
    EXPECT_EQ(status, 0);
}

// A filesystem of its own on a fresh folder, unmounted (and its loop device freed) at the end.
class TestMount {
public:
    TestMount() { std::filesystem::create_directories(at()); }
    ~TestMount() {
        if (mounted_ && ::umount(at().c_str()) != 0) ::umount2(at().c_str(), MNT_DETACH);
    }
    TestMount(const TestMount&) = delete;
    TestMount& operator=(const TestMount&) = delete;
    std::filesystem::path at() const { return dir_ / "mnt"; }

    // A tmpfs of `size` (as mount's size=, "512k").
    bool tmpfs(const std::string& size) {
        mounted_ = ::mount("tmpfs", at().c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
        if (!mounted_) why_ = std::string("mount -t tmpfs: ") + std::strerror(errno);
        return mounted_;
    }
    // A 16 MiB ext4 image on a loop device, mounted errors=remount-ro.
    bool ext4() {
        const auto image = dir_ / "fs.img";
        const std::string cmd = "truncate -s 16M '" + image.string() + "' && mkfs.ext4 -q -F '" + image.string() +
                                "' >/dev/null 2>&1 && mount -o loop,errors=remount-ro '" + image.string() + "' '" +
                                at().string() + "'";
        mounted_ = std::system(cmd.c_str()) == 0;
        if (!mounted_) why_ = "failed: " + cmd;
        return mounted_;
    }
    // The kernel's own error path for the ext4 mount: it turns read-only under its open files.
    bool make_ext4_read_only() {
        std::ifstream mounts("/proc/self/mounts");
        std::string line;
        while (std::getline(mounts, line)) {
            std::istringstream fields(line);
            std::string source, target;
            fields >> source >> target;
            if (target != at().string() || source.rfind("/dev/", 0) != 0) continue;
            std::ofstream trigger("/sys/fs/ext4/" + source.substr(5) + "/trigger_fs_error");
            trigger << "strata store_faults_test: a disk turned read-only";
            trigger.flush();
            return trigger.good();
        }
        return false;
    }
    const std::string& why() const { return why_; }

private:
    test::TempDir dir_;
    bool mounted_ = false;
    std::string why_;
};

// Requests keep being answered from memory after the store turned off mid-run; one warning in all.
// 0 when every check held; else which one failed (printed).
int answered_from_memory_after_a_fault(SessionStore& store, const strata::test::LogLines& w, const char* expect_in_warning) {
    auto fail = [&](int code, const std::string& why) {
        std::fprintf(stderr, "check %d: %s (warnings: %zu%s%s)\n", code, why.c_str(), w.lines.size(), w.lines.empty() ? "" : ": ",
                     w.lines.empty() ? "" : w.lines[0].c_str());
        return code;
    };
    ContextAssembler a(&store, rough_count);
    int answered = 0;
    for (int i = 0; i < 40; ++i)
        if (a.assemble("k", fault_chat(300 + i, 60), {.budget_tokens = 2000}).abridged) ++answered;
    if (answered != 40) return fail(11, std::to_string(answered) + " of 40 answered");
    if (store.available()) return fail(12, "the store is still on");
    if (w.lines.size() != 1) return fail(13, "not one warning");
    if (w.lines[0].find("memory only") == std::string::npos || w.lines[0].find(expect_in_warning) == std::string::npos)
        return fail(14, std::string("the warning does not say memory only and ") + expect_in_warning);
    // New and earlier conversations go on from memory, with no more warnings.
    const Conversation c = fault_chat(8, 60);
    if (!a.assemble("k", c, {.budget_tokens = 2000}).abridged) return fail(15, "not answered");
    if (!a.assemble("k", c, {.budget_tokens = 2000}).stats.session_hit) return fail(16, "not a session hit from memory");
    if (!a.assemble("k", fault_chat(339, 60), {.budget_tokens = 2000}).stats.session_hit)
        return fail(17, "an earlier conversation is not a session hit from memory");
    if (store.n_sessions() != 0 || store.total_bytes() != 0) return fail(18, "a store that is off reports rows");
    return w.lines.size() == 1 ? 0 : fail(19, "more warnings later");
}

TEST(GatewayStoreFaults, AFullDiskWhileRunningTurnsTheStoreOffOnce) {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a small filesystem needs root";
    TestMount fs;
    ASSERT_TRUE(fs.tmpfs("512k")) << fs.why();
    const auto path = fs.at() / "s.db";
    // In a child: a crash (SIGBUS from a mapped file on a full tmpfs) is a failure, not a dead test run.
    const int status = strata::test::run_in_child(-1, [&] {
        strata::test::LogLines w;
        SessionStore store({.path = path, .log = w.sink()});
        if (!store.available()) return 1;
        // A first conversation is stored while there is room.
        ContextAssembler a(&store, rough_count);
        a.assemble("k", fault_chat(1, 60), {.budget_tokens = 2000});
        if (store.n_sessions() != 1 || !w.lines.empty()) return 2;
        // 40 more do not fit in 512 KiB: "database or disk is full: No space left on device".
        return answered_from_memory_after_a_fault(store, w, "No space left on device");
    });
    EXPECT_EQ(status, 0);
    // The file is whole: opened again, it still holds what was committed before the disk filled.
    strata::test::LogLines w;
    SessionStore again({.path = path, .log = w.sink()});
    EXPECT_TRUE(again.available()) << (w.lines.empty() ? "" : w.lines[0]);
    EXPECT_GE(again.n_sessions(), 1);
}

TEST(GatewayStoreFaults, ADiskTurnedReadOnlyWhileRunningTurnsTheStoreOffOnce) {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a small filesystem needs root";
    TestMount fs;
    ASSERT_TRUE(fs.ext4()) << fs.why();
    const auto path = fs.at() / "s.db";
    const int status = strata::test::run_in_child(-1, [&] {
        strata::test::LogLines w;
        SessionStore store({.path = path, .log = w.sink()});
        if (!store.available()) return 1;
        ContextAssembler a(&store, rough_count);
        const Conversation first = fault_chat(1, 60);
        a.assemble("k", first, {.budget_tokens = 2000});
        if (store.n_sessions() != 1 || !w.lines.empty()) return 2;
        if (!fs.make_ext4_read_only()) return 3;
        // The store's file stays open; its next write (the WAL, at COMMIT) fails with EROFS.
        return answered_from_memory_after_a_fault(store, w, "Read-only file system");
    });
    EXPECT_EQ(status, 0);
}

// Editing the last turn of a long chat again and again: each edit is a fork that shares the
// chat's chunks and index instead of copying them.
TEST(GatewaySessionCache, ForksOfAnEditedLastTurnShareTheirPrefix) {
    ContextAssembler a(nullptr, rough_count);
    Conversation c = fault_chat(5, 300);
    a.assemble("k", c, {.budget_tokens = 4000});
    const int64_t one = a.cache().bytes();
    ASSERT_GT(one, 1 << 20) << "a long chat's session";
    for (int i = 0; i < 200; ++i) {
        c.messages.back().text = "Edit number " + std::to_string(i) + ": what did I say first?";
        const AssembleResult r = a.assemble("k", c, {.budget_tokens = 4000});
        ASSERT_TRUE(r.abridged);
        ASSERT_TRUE(r.stats.session_hit);
        ASSERT_EQ(r.stats.chunks_new, 1);
    }
    // 200 forks, each its own message records and last turn: far less than one copy of the chat each.
    EXPECT_EQ(a.cache().size(), 201u);
    EXPECT_LT(a.cache().bytes(), one + 200 * (one / 10)) << "one session " << one;
}

TEST(GatewaySessionCache, TheBoundHoldsOverManyEdits) {
    const int64_t bound = 4 << 20;
    ContextAssembler a(nullptr, rough_count, {}, {.cache_max_bytes = bound});
    for (int chat = 0; chat < 6; ++chat) {
        Conversation c = fault_chat(50 + chat, 200);
        for (int i = 0; i < 30; ++i) {
            c.messages.back().text = "Edit " + std::to_string(i) + " of chat " + std::to_string(chat);
            a.assemble("k", c, {.budget_tokens = 4000});
            ASSERT_LE(a.cache().bytes(), bound) << "chat " << chat << " edit " << i;
        }
    }
}

}  // namespace
}  // namespace strata::gateway
