// The threaded Engine: one engine thread runs EngineCore::Step in a loop; Submit/Abort only push to
// an inbox under a mutex and wake it. Stats are a snapshot published after every step.
// An exception escaping a step (e.g. std::bad_alloc in a kernel) fails the requests in flight with
// Internal and the engine keeps serving: this is the one place exceptions are caught.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <variant>

#include "core/parallel.h"
#include "runtime/engine_core.h"

namespace lucid {
namespace {

struct AddItem {
  uint64_t id;
  GenerationRequest request;
  Engine::Sink sink;
};
struct AbortItem {
  uint64_t id;
};

class ThreadedEngine final : public Engine {
 public:
  ThreadedEngine(std::unique_ptr<EngineCore> core, const EngineOptions& options)
      : core_(std::move(core)),
        threads_(NumThreads()),
        idle_tick_(options.idle_tick),
        idle_tick_every_(options.idle_tick_every),
        contention_(threads_, options.cpu_busy_threads,
                    options.cpu_reader ? options.cpu_reader : CpuReader(ReadCpu)) {
    stats_ = core_->Stats();
    stats_.cpu_team_threads = threads_;
    // OpenMP's thread count is per thread: carry the creator's (SetNumThreads, OMP_NUM_THREADS)
    // over to the engine thread, which runs every kernel.
    const int threads = threads_;
    thread_ = std::thread([this, threads] {
      SetNumThreads(threads);
      Loop();
    });
  }
  ~ThreadedEngine() override { Stop(); }

  StatusOr<uint64_t> Submit(GenerationRequest request, Sink sink) override {
    LUCID_RETURN_IF_ERROR(core_->Validate(request));
    if (!sink) return InvalidArgument("Submit: no sink");
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kUnavailable, "engine is stopped");
    const uint64_t id = next_id_++;
    inbox_.emplace_back(AddItem{id, std::move(request), std::move(sink)});
    ++inbox_adds_;
    cv_.notify_one();
    return id;
  }

  void Abort(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    inbox_.emplace_back(AbortItem{id});
    cv_.notify_one();
  }

  EngineStats Stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EngineStats s = stats_;
    s.queued += inbox_adds_;
    return s;
  }

  const ModelConfig& model_config() const override { return core_->model_config(); }

  void Stop() override {
    std::call_once(stop_once_, [this] {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
        cv_.notify_one();
      }
      thread_.join();
    });
  }

 private:
  void Apply(std::vector<std::variant<AddItem, AbortItem>>& items) {
    for (auto& item : items) {
      if (auto* add = std::get_if<AddItem>(&item)) {
        core_->Add(add->id, std::move(add->request), std::move(add->sink));
      } else {
        core_->Abort(std::get<AbortItem>(item).id);
      }
    }
  }

  void StepGuarded() {
    try {
      core_->Step();
    } catch (const std::exception& e) {
      // The KV of the step is unspecified: nobody in flight can continue safely.
      core_->FailAll(Internal(std::string("engine step failed: ") + e.what()));
    }
  }

  void Loop() {
    for (;;) {
      std::vector<std::variant<AddItem, AbortItem>> items;
      bool stop = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        auto ready = [&] { return stopping_ || !inbox_.empty() || core_->HasWork(); };
        if (!idle_tick_) {
          cv_.wait(lock, ready);
        } else if (!cv_.wait_for(lock, idle_tick_every_, ready)) {
          lock.unlock();
          idle_tick_();  // nothing to do for idle_tick_every
          continue;
        }
        items.swap(inbox_);
        inbox_adds_ = 0;
        stop = stopping_;
      }
      Apply(items);
      if (stop) {
        core_->AbortAll();
        Publish();
        return;
      }
      StepGuarded();
      if (contention_.enabled()) {
        const double now =
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                .count();
        SetTeamLimit(contention_.AfterStep(now));
      }
      Publish();
    }
  }

  void Publish() {
    EngineStats s = core_->Stats();
    s.cpu_team_threads = contention_.team();
    s.cpu_team_lowerings = contention_.lowerings();
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = s;
  }

  std::unique_ptr<EngineCore> core_;
  const int threads_;
  const std::function<void()> idle_tick_;
  const std::chrono::milliseconds idle_tick_every_;
  ContentionRule contention_;  // the engine thread's only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::variant<AddItem, AbortItem>> inbox_;
  int64_t inbox_adds_ = 0;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  EngineStats stats_;
  std::once_flag stop_once_;
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<Engine>> CreateEngine(std::unique_ptr<Model> model,
                                               std::shared_ptr<const tok::Tokenizer> tokenizer,
                                               const EngineOptions& options) {
  if (options.cpu_busy_threads < 0)
    return InvalidArgument("cpu_busy_threads must be >= 0 (0: the contention rule is off), got " +
                           std::to_string(options.cpu_busy_threads));
  LUCID_ASSIGN_OR_RETURN(auto core,
                         EngineCore::Create(std::move(model), std::move(tokenizer), options));
  return std::unique_ptr<Engine>(new ThreadedEngine(std::move(core), options));
}

std::unique_ptr<Engine> MakeEngine(std::unique_ptr<Model> model,
                                   std::shared_ptr<const tok::Tokenizer> tokenizer,
                                   const EngineOptions& options) {
  auto engine = CreateEngine(std::move(model), std::move(tokenizer), options);
  LUCID_CHECK(engine.ok(), engine.status().ToString());
  return std::move(engine).value();
}

}  // namespace lucid
