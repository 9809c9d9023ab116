// Admission with real threads: never more than `slots` requests hold a slot, a full queue refuses
// at once, a waiter whose client left gives its place back, and waiters are served round-robin
// across clients and first come first served within one. Order is made deterministic by letting
// each waiter in only after admission.waiting() shows the previous one queued, and by releasing
// one slot at a time; nothing depends on how long anything takes.
#include "serve/admission.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace strata::serve {
namespace {

using namespace std::chrono_literals;
using Outcome = Admission::Outcome;

// Long enough for a sanitizer build on a loaded machine; only reached when something is wrong.
constexpr auto kPatience = 60s;

// Polls `done` until it holds or kPatience runs out (for state only visible through Admission's
// counters, such as "this thread is now queued").
bool eventually(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

// Requester threads: each asks for a slot under its client's name, reports the outcome, and holds
// a granted slot until the test lets it go. The destructor lets everyone go and joins, so a failed
// assertion never leaves a thread blocked.
class Requesters {
public:
    explicit Requesters(Admission& admission) : admission_(admission) {}
    ~Requesters() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            release_all_ = true;
            for (auto& [id, gone] : gone_) *gone = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }

    // Starts requester `id` and returns once it holds a slot, has been refused, or is queued
    // (waiting() grew): so requesters started one after another queue in that order.
    void start(int id, const std::string& client) {
        const int queued_before = admission_.waiting();
        auto gone = std::make_shared<std::atomic<bool>>(false);
        {
            std::lock_guard<std::mutex> lock(mu_);
            gone_[id] = gone;
        }
        threads_.emplace_back([this, id, client, gone] {
            Admission::Ticket ticket;
            const Outcome outcome = admission_.acquire(
                client, [gone] { return gone->load(); }, ticket);
            std::unique_lock<std::mutex> lock(mu_);
            outcomes_[id] = outcome;
            if (outcome == Outcome::Admitted) {
                granted_.push_back(id);
                if (++inside_ > peak_) peak_ = inside_;
            }
            cv_.notify_all();
            if (outcome != Outcome::Admitted) return;
            cv_.wait(lock, [&] { return release_all_ || released_.count(id) > 0; });
            --inside_;
            // `ticket` gives the slot back as the thread ends, after `inside_` went down.
        });
        EXPECT_TRUE(eventually([&] { return admission_.waiting() > queued_before || outcome(id).has_value(); }))
            << "requester " << id << " neither queued nor finished";
    }

    void let_go(int id) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            released_.insert(id);
        }
        cv_.notify_all();
    }
    void leave(int id) { *gone_.at(id) = true; }

    // Waits until `n` requesters have been granted a slot.
    bool wait_granted(size_t n) {
        std::unique_lock<std::mutex> lock(mu_);
        return cv_.wait_for(lock, kPatience, [&] { return granted_.size() >= n; });
    }
    bool wait_outcome(int id) {
        std::unique_lock<std::mutex> lock(mu_);
        return cv_.wait_for(lock, kPatience, [&] { return outcomes_.count(id) > 0; });
    }
    std::optional<Outcome> outcome(int id) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = outcomes_.find(id);
        return it == outcomes_.end() ? std::nullopt : std::optional<Outcome>(it->second);
    }
    std::vector<int> granted() {
        std::lock_guard<std::mutex> lock(mu_);
        return granted_;
    }
    int peak() {
        std::lock_guard<std::mutex> lock(mu_);
        return peak_;
    }

    // Lets the granted requesters go in the order they were granted, one at a time: the next is let
    // go only after the previous release was handed on (with s slots, k - 1 releases make
    // k - 1 + s grants), so the order of grants does not depend on which thread runs first.
    // Returns the order of grants once `total` were granted.
    std::vector<int> drain(size_t total) {
        const size_t slots = static_cast<size_t>(admission_.slots());
        for (size_t k = 1; k <= total; ++k) {
            if (!wait_granted(std::min(total, k - 1 + slots))) {
                ADD_FAILURE() << "only " << granted().size() << " of " << total << " requesters were granted a slot";
                break;
            }
            let_go(granted()[k - 1]);
        }
        return granted();
    }

private:
    Admission& admission_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::thread> threads_;
    std::map<int, std::shared_ptr<std::atomic<bool>>> gone_;
    std::map<int, Outcome> outcomes_;
    std::vector<int> granted_;
    std::set<int> released_;
    bool release_all_ = false;
    int inside_ = 0, peak_ = 0;
};

const auto never_gone = [] { return false; };

TEST(Admission, TicketsHoldAndReleaseSlots) {
    Admission admission(2, 4);
    Admission::Ticket a, b;
    EXPECT_FALSE(a);
    ASSERT_EQ(admission.acquire("x", never_gone, a), Outcome::Admitted);
    ASSERT_EQ(admission.acquire("y", never_gone, b), Outcome::Admitted);
    EXPECT_TRUE(a);
    EXPECT_EQ(admission.running(), 2);
    EXPECT_EQ(admission.waiting(), 0);
    // Moving a ticket moves the slot; it is given back exactly once.
    Admission::Ticket moved(std::move(a));
    EXPECT_FALSE(a);
    EXPECT_TRUE(moved);
    EXPECT_EQ(admission.running(), 2);
    { Admission::Ticket gone(std::move(moved)); }
    EXPECT_EQ(admission.running(), 1);
    b = Admission::Ticket();
    EXPECT_EQ(admission.running(), 0);
}

TEST(Admission, AtMostSlotsRunAndTheRestWait) {
    constexpr int kSlots = 3, kRequesters = 8;
    Admission admission(kSlots, 16);
    {
        Requesters r(admission);
        for (int id = 0; id < kRequesters; ++id) r.start(id, "client" + std::to_string(id));
        ASSERT_TRUE(r.wait_granted(kSlots));
        EXPECT_EQ(admission.running(), kSlots);
        EXPECT_EQ(admission.waiting(), kRequesters - kSlots);
        EXPECT_EQ(r.granted().size(),
                  static_cast<size_t>(kSlots));  // all others queued: no grant can be pending
        const std::vector<int> order = r.drain(kRequesters);
        EXPECT_EQ(order.size(), static_cast<size_t>(kRequesters));
        EXPECT_EQ(r.peak(), kSlots);
    }
    EXPECT_EQ(admission.running(), 0);
    EXPECT_EQ(admission.waiting(), 0);
}

TEST(Admission, ManyThreadsNeverExceedTheSlots) {
    constexpr int kSlots = 3, kThreads = 12;
    const int64_t rounds = strata::test::scaled(100, 20);
    Admission admission(kSlots, kThreads);  // room for every thread: nobody is refused
    std::atomic<int> inside{0}, peak{0}, admitted{0}, refused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int64_t i = 0; i < rounds; ++i) {
                Admission::Ticket ticket;
                if (admission.acquire("client" + std::to_string(t % 4), never_gone, ticket) != Outcome::Admitted) {
                    ++refused;
                    continue;
                }
                const int now = ++inside;
                int seen = peak.load();
                while (now > seen && !peak.compare_exchange_weak(seen, now)) {
                }
                std::this_thread::yield();
                --inside;
                ++admitted;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(refused.load(), 0);
    EXPECT_EQ(admitted.load(), kThreads * rounds);
    EXPECT_LE(peak.load(), kSlots);
    EXPECT_GE(peak.load(), 1);
    EXPECT_EQ(admission.running(), 0);
    EXPECT_EQ(admission.waiting(), 0);
}

TEST(Admission, AFullQueueRefusesAtOnce) {
    Admission admission(1, 2);
    Admission::Ticket held;
    ASSERT_EQ(admission.acquire("a", never_gone, held), Outcome::Admitted);
    {
        Requesters r(admission);
        r.start(1, "a");
        r.start(2, "b");
        ASSERT_EQ(admission.waiting(), 2);
        Admission::Ticket refused;
        EXPECT_EQ(admission.acquire("c", never_gone, refused), Outcome::QueueFull);
        EXPECT_FALSE(refused);
        EXPECT_EQ(admission.acquire("a", never_gone, refused), Outcome::QueueFull);
        EXPECT_EQ(admission.waiting(), 2);
        EXPECT_EQ(admission.running(), 1);
        held = Admission::Ticket();
        EXPECT_EQ(r.drain(2), (std::vector<int>{1, 2}));
    }
    EXPECT_EQ(admission.running(), 0);
    // A queue of no places refuses as soon as the slots are taken.
    Admission no_queue(1, 0);
    Admission::Ticket first, second;
    EXPECT_EQ(no_queue.acquire("a", never_gone, first), Outcome::Admitted);
    EXPECT_EQ(no_queue.acquire("b", never_gone, second), Outcome::QueueFull);
}

TEST(Admission, AWaiterWhoLeftGivesItsPlaceBack) {
    Admission admission(1, 1);
    Admission::Ticket held;
    ASSERT_EQ(admission.acquire("a", never_gone, held), Outcome::Admitted);
    {
        Requesters r(admission);
        r.start(1, "b");
        ASSERT_EQ(admission.waiting(), 1);
        Admission::Ticket refused;
        EXPECT_EQ(admission.acquire("c", never_gone, refused), Outcome::QueueFull);

        r.leave(1);
        ASSERT_TRUE(r.wait_outcome(1));
        EXPECT_EQ(r.outcome(1), Outcome::Gone);
        EXPECT_EQ(admission.waiting(), 0);
        EXPECT_EQ(admission.running(), 1);  // the slot stayed with its holder

        // The place is free again, and the slot goes to the new waiter, not the one who left.
        r.start(2, "c");
        EXPECT_EQ(admission.waiting(), 1);
        held = Admission::Ticket();
        EXPECT_EQ(r.drain(1), std::vector<int>{2});
    }
    EXPECT_EQ(admission.running(), 0);
    EXPECT_EQ(admission.waiting(), 0);
}

TEST(Admission, LeavingFromTheMiddleOfAClientsQueue) {
    Admission admission(1, 8);
    Admission::Ticket held;
    ASSERT_EQ(admission.acquire("h", never_gone, held), Outcome::Admitted);
    {
        Requesters r(admission);
        r.start(1, "a");
        r.start(2, "a");
        r.start(3, "a");
        r.start(4, "b");  // b's only waiter leaves: b must drop out of the rotation
        r.start(5, "c");
        ASSERT_EQ(admission.waiting(), 5);
        r.leave(2);
        r.leave(4);
        ASSERT_TRUE(r.wait_outcome(2));
        ASSERT_TRUE(r.wait_outcome(4));
        EXPECT_EQ(admission.waiting(), 3);
        held = Admission::Ticket();
        EXPECT_EQ(r.drain(3), (std::vector<int>{1, 5, 3}));
        EXPECT_EQ(r.outcome(2), Outcome::Gone);
        EXPECT_EQ(r.outcome(4), Outcome::Gone);
    }
    EXPECT_EQ(admission.running(), 0);
    EXPECT_EQ(admission.waiting(), 0);
}

TEST(Admission, ClientsTakeTurnsAndEachClientIsFirstComeFirstServed) {
    // Client A queues 10 requests, then B queues one: B goes second, not eleventh.
    Admission admission(1, 32);
    Admission::Ticket held;
    ASSERT_EQ(admission.acquire("holder", never_gone, held), Outcome::Admitted);
    {
        Requesters r(admission);
        for (int id = 1; id <= 10; ++id) r.start(id, "A");
        r.start(100, "B");
        ASSERT_EQ(admission.waiting(), 11);
        held = Admission::Ticket();
        EXPECT_EQ(r.drain(11), (std::vector<int>{1, 100, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    }
    EXPECT_EQ(admission.running(), 0);
}

TEST(Admission, ThreeClientsRoundRobin) {
    Admission admission(1, 32);
    Admission::Ticket held;
    ASSERT_EQ(admission.acquire("holder", never_gone, held), Outcome::Admitted);
    {
        Requesters r(admission);
        for (int id : {11, 12, 13}) r.start(id, "A");
        for (int id : {21, 22, 23}) r.start(id, "B");
        r.start(31, "C");
        ASSERT_EQ(admission.waiting(), 7);
        held = Admission::Ticket();
        EXPECT_EQ(r.drain(7), (std::vector<int>{11, 21, 31, 12, 22, 13, 23}));
    }
}

TEST(Admission, TurnsWithSeveralSlots) {
    // Two slots: each release hands the freed slot to the next client in turn.
    Admission admission(2, 32);
    Admission::Ticket held1, held2;
    ASSERT_EQ(admission.acquire("holder", never_gone, held1), Outcome::Admitted);
    ASSERT_EQ(admission.acquire("holder", never_gone, held2), Outcome::Admitted);
    {
        Requesters r(admission);
        for (int id : {1, 2, 3, 4}) r.start(id, "A");
        r.start(5, "B");
        ASSERT_EQ(admission.waiting(), 5);
        held1 = Admission::Ticket();
        ASSERT_TRUE(r.wait_granted(1));
        held2 = Admission::Ticket();
        ASSERT_TRUE(r.wait_granted(2));
        EXPECT_EQ(r.granted(), (std::vector<int>{1, 5}));
        EXPECT_EQ(r.drain(5), (std::vector<int>{1, 5, 2, 3, 4}));
    }
}

}  // namespace
}  // namespace strata::serve
