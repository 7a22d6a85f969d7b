// `tessera completion bash|zsh` (issue 35): the script, generated from the command table, loaded
// into a real bash that then completes as a person's Tab would (the script's function filling
// COMPREPLY through compgen); and the enumerated flags it offers values for, each refused with
// "did you mean" when mistyped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "run_tessera.h"
#include "support/test_dir.h"

namespace tessera::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class CompletionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("cli-completion");
    ProcessResult r = Tessera({"completion", "bash"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    script_ = dir_ + "/tessera.bash";
    std::ofstream(script_) << r.out;
  }
  // What Tab offers after `line` (the words typed so far; a trailing space starts a new word):
  // bash with the script loaded runs its completion function, which fills COMPREPLY.
  std::string Complete(const std::string& line) {
    std::ofstream(dir_ + "/run.sh")
        << "source '" << script_ << "'\n"
        << "line='" << line << "'\n"
        << "read -ra COMP_WORDS <<< \"$line\"\n"
        << "[[ \"$line\" == *' ' ]] && COMP_WORDS+=('')\n"
        << "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
        << "_tessera\n"
        << "((${#COMPREPLY[@]})) && printf '%s\\n' \"${COMPREPLY[@]}\" | sort | tr '\\n' ' '\n"
        << "exit 0\n";
    const std::string out = dir_ + "/run.out";
    const int rc = std::system(("bash --norc " + dir_ + "/run.sh > " + out + " 2>&1").c_str());
    EXPECT_EQ(rc, 0) << ReadWholeFile(out);
    return ReadWholeFile(out);
  }
  std::string dir_, script_;
};

TEST_F(CompletionTest, CommandsFlagsAndTheValuesOfEnumeratedFlags) {
  EXPECT_EQ(Complete("tessera jo"), "job jobs ");
  EXPECT_EQ(Complete("tessera dr"), "drain ");
  EXPECT_THAT(Complete("tessera "), HasSubstr("cordon "));
  EXPECT_THAT(Complete("tessera "), HasSubstr("completion "));
  EXPECT_EQ(Complete("tessera sim op"), "openb ");
  EXPECT_EQ(Complete("tessera jobs --st"), "--state ");
  EXPECT_EQ(Complete("tessera jobs --state run"), "running ");
  EXPECT_EQ(Complete("tessera jobs --state=p"),
            "--state=pending --state=placed --state=preempting ");
  EXPECT_EQ(Complete("tessera submit --form "), "partition share whole ");
  EXPECT_EQ(Complete("tessera submit --queue q --cl"), "--class ");
  EXPECT_EQ(Complete("tessera submit --class tr"), "training ");
  EXPECT_EQ(Complete("tessera usage --by "), "form group identity queue ");
  EXPECT_EQ(Complete("tessera serve --log-format "), "json text ");
  EXPECT_EQ(Complete("tessera completion "), "bash zsh ");
  // After the job's command begins, nothing of tessera's.
  EXPECT_EQ(Complete("tessera submit --queue q -- py"), "");
}

TEST_F(CompletionTest, ZshGetsTheSameThroughBashcompinit) {
  ProcessResult r = Tessera({"completion", "zsh"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bashcompinit"));
  EXPECT_THAT(r.out, HasSubstr("complete -o default -F _tessera tessera"));
  ProcessResult bad = Tessera({"completion", "fish"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("unknown shell 'fish'"));
}

// Every enumerated flag is checked as it is parsed (no server needed), with "did you mean" and
// the valid names: a breakdown, log level and format, placement policies.
TEST(EnumeratedFlagsTest, AMistypedValueIsRefusedWithASuggestion) {
  struct Case {
    std::vector<std::string> args;
    std::string said;
  };
  for (const Case& c :
       {Case{{"usage", "--by", "grup"}, "unknown breakdown 'grup'; did you mean group?"},
        Case{{"serve", "--config", "x", "--log-level", "debg"},
             "unknown log level 'debg'; did you mean debug?"},
        Case{{"serve", "--config", "x", "--log-format", "jsn"},
             "unknown log format 'jsn'; did you mean json?"},
        Case{{"bench", "placement", "--policy", "tesera"},
             "unknown policy 'tesera'; did you mean tessera?"},
        Case{{"sim", "openb", "--nodes", "n", "--pods", "p", "--policy", "tessera,bestfitt"},
             "unknown policy 'bestfitt'; did you mean bestfit?"},
        Case{{"jobs", "--state", "runing"}, "unknown state 'runing'; did you mean running?"},
        Case{{"submit", "--queue", "q", "--form", "hole", "--", "true"},
             "unknown form 'hole'; did you mean whole?"}}) {
    ProcessResult r = Tessera(c.args, {"TESSERA_URL=http://127.0.0.1:1", "TESSERA_TOKEN=x"});
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.said)) << c.args[0];
    EXPECT_THAT(r.err, Not(HasSubstr("cannot reach")));
  }
}

}  // namespace
}  // namespace tessera::testing
