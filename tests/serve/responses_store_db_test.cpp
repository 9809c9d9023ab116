// Stored responses in SQLite (strata serve --responses-db): a round trip, the bounds (count and
// bytes, oldest first) kept in the file too, a reopened store answering what the last one kept,
// a corrupt file moved aside, and a folder or file that cannot be written, a file locked by
// another process or a write that fails (a file-size limit) degrading to memory with one warning.
// The read-only case runs as an unprivileged user when the tests run as root (root writes
// read-only files); the size limit and the lock holder are child processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <random>

#include "serve/responses_store.h"
#include "test_util.h"

namespace strata::serve {
namespace {

StoredResponse db_entry(const std::string& id, const std::string& owner, size_t pad = 10) {
    StoredResponse s;
    s.id = id;
    s.owner = owner;
    s.response = {{"id", id}, {"object", "response"}, {"pad", std::string(pad, 'x')}};
    s.input = nlohmann::ordered_json::array({{{"type", "message"}, {"role", "user"}, {"content", "hi " + id}}});
    s.context = nlohmann::ordered_json::array({{{"type", "message"}, {"role", "assistant"}, {"content", "ctx"}}});
    return s;
}

ResponseStoreOptions db_options(const std::filesystem::path& path, strata::test::LogLines* w, int64_t count = 100,
                                int64_t bytes = 1 << 20) {
    ResponseStoreOptions o;
    o.max_count = count;
    o.max_bytes = bytes;
    o.db = path;
    if (w) o.log = w->sink();
    return o;
}

TEST(ResponsesStoreDb, RoundTripAndReopenKeepsEntries) {
    test::TempDir dir;
    const auto path = dir / "sub" / "responses.db";  // the folder is made
    strata::test::LogLines w;
    {
        ResponseStore store(db_options(path, &w));
        EXPECT_TRUE(store.persistent());
        store.put(db_entry("a", "alice"));
        store.put(db_entry("b", "bob"));
        store.put(db_entry("c", "alice"));
        EXPECT_TRUE(store.erase("c", "alice"));
        const auto a = store.get("a", "alice");
        ASSERT_NE(a, nullptr);
        EXPECT_EQ(a->input[0]["content"], "hi a");
    }
    ResponseStore again(db_options(path, &w));
    EXPECT_TRUE(again.persistent());
    EXPECT_EQ(again.count(), 2);
    const auto a = again.get("a", "alice");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->response, db_entry("a", "alice").response);
    EXPECT_EQ(a->input, db_entry("a", "alice").input);
    EXPECT_EQ(a->context, db_entry("a", "alice").context);
    EXPECT_EQ(again.get("a", "bob"), nullptr);  // still only its owner's
    EXPECT_NE(again.get("b", "bob"), nullptr);
    EXPECT_EQ(again.get("c", "alice"), nullptr);  // deleted stays deleted
    EXPECT_EQ(again.bytes(), static_cast<int64_t>(a->bytes + again.get("b", "bob")->bytes));
    EXPECT_TRUE(w.lines.empty());
    // Order survives: the oldest (a) goes first after the reopen.
    again.put(db_entry("d", "alice"));
    EXPECT_EQ(again.count(), 3);
}

TEST(ResponsesStoreDb, BoundsEvictOldestInTheFileToo) {
    test::TempDir dir;
    const auto path = dir / "responses.db";
    {
        ResponseStore store(db_options(path, nullptr, 3));
        for (const char* id : {"a", "b", "c", "d", "e"}) store.put(db_entry(id, "k"));
        EXPECT_EQ(store.count(), 3);
        EXPECT_EQ(store.get("b", "k"), nullptr);
        store.put(db_entry("c", "k"));  // replaced: now the newest
    }
    {
        ResponseStore store(db_options(path, nullptr, 3));
        EXPECT_EQ(store.count(), 3);
        EXPECT_EQ(store.get("a", "k"), nullptr);
        EXPECT_EQ(store.get("b", "k"), nullptr);
        store.put(db_entry("f", "k"));  // d is the oldest now
        EXPECT_EQ(store.get("d", "k"), nullptr);
        EXPECT_NE(store.get("c", "k"), nullptr);
    }
    {
        // Lower bounds at the next start: the oldest rows go, from the file as well.
        ResponseStore store(db_options(path, nullptr, 1));
        EXPECT_EQ(store.count(), 1);
        EXPECT_NE(store.get("f", "k"), nullptr);
    }
    {
        ResponseStore store(db_options(path, nullptr, 100));
        EXPECT_EQ(store.count(), 1);
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM responses", -1, &s, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(s, 0), 1);
    sqlite3_finalize(s);
    sqlite3_close(db);
}

TEST(ResponsesStoreDb, ByteBoundEvictsOldest) {
    test::TempDir dir;
    const auto path = dir / "responses.db";
    {
        ResponseStore store(db_options(path, nullptr, 100, 3000));
        for (const char* id : {"a", "b", "c"}) store.put(db_entry(id, "k", 1000));
        EXPECT_LE(store.bytes(), 3000);
        EXPECT_EQ(store.get("a", "k"), nullptr);
        store.put(db_entry("huge", "k", 5000));  // larger than the bound alone: not kept
        EXPECT_EQ(store.get("huge", "k"), nullptr);
    }
    ResponseStore store(db_options(path, nullptr, 100, 3000));
    EXPECT_EQ(store.get("a", "k"), nullptr);
    EXPECT_EQ(store.get("huge", "k"), nullptr);
    EXPECT_NE(store.get("b", "k"), nullptr);
    EXPECT_NE(store.get("c", "k"), nullptr);
    EXPECT_LE(store.bytes(), 3000);
}

TEST(ResponsesStoreDb, CorruptFileMovedAsideAndAFreshStoreMade) {
    test::TempDir dir;
    const auto path = dir / "responses.db";
    std::string junk(64 << 10, '\0');
    std::mt19937 rng(11);
    for (char& ch : junk) ch = static_cast<char>(rng());
    std::ofstream(path, std::ios::binary) << junk;
    strata::test::LogLines w;
    {
        ResponseStore store(db_options(path, &w));
        EXPECT_TRUE(store.persistent());
        ASSERT_EQ(w.lines.size(), 1u);
        EXPECT_NE(w.lines[0].find("moved aside"), std::string::npos) << w.lines[0];
        store.put(db_entry("a", "k"));
    }
    int aside = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
        if (e.path().filename().string().rfind("responses.db.corrupt-", 0) == 0) {
            ++aside;
            EXPECT_EQ(std::filesystem::file_size(e.path()), junk.size());
        }
    EXPECT_EQ(aside, 1);
    ResponseStore again(db_options(path, &w));  // the fresh file works
    EXPECT_NE(again.get("a", "k"), nullptr);
    EXPECT_EQ(w.lines.size(), 1u);
}

TEST(ResponsesStoreDb, UnwritablePathMeansMemoryOnly) {
    test::TempDir dir;
    ::chmod(dir.path().c_str(), 0777);
    const auto ro_file = dir / "ro.db";
    {
        ResponseStore made(db_options(ro_file, nullptr));
        ASSERT_TRUE(made.persistent());
    }
    ::chmod(ro_file.c_str(), 0444);
    const auto ro_dir = dir / "ro-dir";
    std::filesystem::create_directories(ro_dir);
    ::chmod(ro_dir.c_str(), 0555);
    std::ofstream(dir / "a-file") << "x";
    const int uid = ::geteuid() == 0 ? 65534 : -1;
    const int status = strata::test::run_in_child(uid, [&] {
        for (const auto& path :
             {ro_file, ro_dir / "r.db", dir / "a-file" / "r.db", std::filesystem::path("/proc/strata-no-such/r.db")}) {
            strata::test::LogLines w;
            ResponseStore store(db_options(path, &w));
            if (store.persistent()) return 1;
            if (w.lines.size() != 1 || w.lines[0].find("memory only") == std::string::npos) return 2;
            store.put(db_entry("a", "k"));  // memory still answers
            if (store.get("a", "k") == nullptr) return 3;
            if (!store.erase("a", "k")) return 4;
            if (w.lines.size() != 1) return 5;
        }
        return 0;
    });
    EXPECT_EQ(status, 0);
}

TEST(ResponsesStoreDb, LockedByAnotherProcessMeansMemoryOnlyAtOnce) {
    test::TempDir dir;
    const auto path = dir / "responses.db";
    { ResponseStore made(db_options(path, nullptr)); }
    int ready[2], release[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(release), 0);
    const pid_t holder = ::fork();
    if (holder == 0) {
        ResponseStore other(db_options(path, nullptr));  // a second serve on the same file
        const char ok = other.persistent() ? 'y' : 'n';
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
    ResponseStore store(db_options(path, &w));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(store.persistent());
    EXPECT_LT(s, 5.0);
    ASSERT_EQ(w.lines.size(), 1u);
    EXPECT_NE(w.lines[0].find("locked"), std::string::npos) << w.lines[0];
    store.put(db_entry("a", "k"));
    EXPECT_NE(store.get("a", "k"), nullptr);
    [[maybe_unused]] ssize_t n = ::write(release[1], "x", 1);
    ::waitpid(holder, nullptr, 0);
}

TEST(ResponsesStoreDb, AFailedWriteTurnsTheFileOffOnce) {
    test::TempDir dir;
    const auto path = dir / "responses.db";
    // A file-size limit (as `ulimit -f`): writes past it fail with EFBIG (SIGXFSZ ignored, as
    // serve does); the store says so once and goes on from memory.
    const int status = strata::test::run_in_child(-1, [&] {
        ::signal(SIGXFSZ, SIG_IGN);
        strata::test::LogLines w;
        ResponseStore store(db_options(path, &w, 1000, 64 << 20));
        if (!store.persistent()) return 1;
        const rlimit limit{256 << 10, 256 << 10};
        if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
        for (int i = 0; i < 40; ++i) store.put(db_entry("r" + std::to_string(i), "k", 20000));
        if (store.persistent()) return 3;  // 800 KB do not fit in 256 KiB
        if (store.count() != 40) return 4;
        for (int i = 0; i < 40; ++i)
            if (store.get("r" + std::to_string(i), "k") == nullptr) return 5;
        if (w.lines.size() != 1 || w.lines[0].find("memory only") == std::string::npos) return 6;
        store.put(db_entry("later", "k"));
        if (store.get("later", "k") == nullptr) return 7;
        return w.lines.size() == 1 ? 0 : 8;
    });
    EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace strata::serve
