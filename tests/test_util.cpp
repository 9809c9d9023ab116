#include "test_util.h"

#include <sys/wait.h>

#include <fstream>
#include <sstream>

namespace strata::test {

static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

CommandResult run_strata(const std::string& args, const std::string& stdin_text) {
    TempDir dir;
    {
        std::ofstream in(dir / "stdin", std::ios::binary);
        in << stdin_text;
    }
    const std::string cmd = std::string("'") + STRATA_BINARY + "' " + args + " <'" + (dir / "stdin").string() + "' >'" +
                            (dir / "stdout").string() + "' 2>'" + (dir / "stderr").string() + "'";
    const int status = std::system(cmd.c_str());
    CommandResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    r.out = slurp(dir / "stdout");
    r.err = slurp(dir / "stderr");
    return r;
}

}  // namespace strata::test
