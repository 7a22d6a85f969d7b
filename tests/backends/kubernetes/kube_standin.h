// The stand-in Kubernetes API server (tests/backends/kube, Python) for the C++ tests: started as
// a real process on a fixed port (so a restart keeps it), with TLS (a CA, a server certificate
// for localhost, a client certificate) made by the openssl command, a rotating token file,
// nodes with GPUs, and its fault endpoints. It stands in for a real API server, which cannot run
// on these machines.
#pragma once

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "../../api/proc.h"
#include "../../support/free_port.h"

namespace tessera::testing {

class KubeStandIn {
 public:
  // Nodes: n1 (4 GPUs, ready), n2 (4, cordoned), n3 (2, not ready), n4 (2, tainted gpu=reserved).
  static constexpr const char* kNodes =
      R"(- metadata: {name: n1, labels: {pool: a100, nvidia.com/gpu.product: A100-SXM4-80GB}}
  status: {allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "4"}, conditions: [{type: Ready, status: "True"}]}
- metadata: {name: n2, labels: {pool: a100}}
  spec: {unschedulable: true}
  status: {allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "4"}, conditions: [{type: Ready, status: "True"}]}
- metadata: {name: n3, labels: {pool: a100}}
  status: {allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "2"}, conditions: [{type: Ready, status: "False"}]}
- metadata: {name: n4, labels: {pool: t4}}
  spec: {taints: [{key: gpu, value: reserved, effect: NoSchedule}]}
  status: {allocatable: {cpu: "16", memory: 64Gi, nvidia.com/gpu: "2"}, conditions: [{type: Ready, status: "True"}]}
)";

  // One ready node with 4 GPUs in pool a100.
  static constexpr const char* kOneNode = R"(- metadata: {name: n1, labels: {pool: a100}}
  status: {allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "4"}, conditions: [{type: Ready, status: "True"}]}
)";

  explicit KubeStandIn(const std::string& dir, bool client_cert = true,
                       const std::string& nodes = kNodes)
      : dir_(dir), client_cert_(client_cert) {
    namespace fs = std::filesystem;
    fs::create_directories(dir_);
    const std::string d = dir_;
    const std::string openssl =
        "cd " + d +
        " && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key "
        "-out ca.crt 2>/dev/null"
        " && openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out "
        "server.csr 2>/dev/null"
        " && printf 'subjectAltName=DNS:localhost,DNS:kube.internal,IP:127.0.0.1' > san.ext"
        " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile san.ext -out server.crt 2>/dev/null"
        " && openssl req -newkey rsa:2048 -nodes -subj /CN=tessera -keyout client.key -out "
        "client.csr 2>/dev/null"
        " && openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
        "-out client.crt 2>/dev/null";
    if (std::system(openssl.c_str()) != 0) error_ = "openssl could not make the certificates";
    std::ofstream(d + "/nodes.yaml") << nodes;
    SetServerTokens("token-one\n");
    std::ofstream(d + "/client-token") << "token-one\n";
    port_ = FreePort();
    WriteKubeconfig();
    Start();
  }
  ~KubeStandIn() { Stop(); }

  void Start() {
    std::filesystem::remove(dir_ + "/port");
    std::vector<std::string> argv = {
        "/usr/bin/python3", TESSERA_SOURCE_DIR "/tests/backends/kube/kube_apiserver.py",
        "--port",           std::to_string(port_),
        "--port-file",      dir_ + "/port",
        "--tls-cert",       dir_ + "/server.crt",
        "--tls-key",        dir_ + "/server.key",
        "--token-file",     dir_ + "/server-tokens",
        "--state-file",     dir_ + "/state.json",
        "--nodes",          dir_ + "/nodes.yaml",
        "--tick-ms",        "50",
        "--history",        "200"};
    if (client_cert_) {
      argv.push_back("--client-ca");
      argv.push_back(dir_ + "/ca.crt");
    }
    proc_ = std::make_unique<Proc>(argv, dir_ + "/standin.log");
    if (!WaitFor([&] { return std::filesystem::exists(dir_ + "/port"); }, std::chrono::seconds(15),
                 std::chrono::milliseconds(50)))
      error_ = "the stand-in did not start:\n" + proc_->Log();
  }
  // Empty when it runs; else what went wrong.
  const std::string& error() const { return error_; }
  void Stop() {
    control_.reset();
    if (proc_) proc_->Kill(SIGTERM);
    proc_.reset();
  }
  void SetServerTokens(const std::string& lines) {
    std::ofstream(dir_ + "/server-tokens") << lines;
  }
  void SetClientToken(const std::string& t) {
    std::ofstream(dir_ + "/client-token.tmp") << t << "\n";
    std::filesystem::rename(dir_ + "/client-token.tmp", dir_ + "/client-token");
  }

  // A kubeconfig with two users: "cert" (client certificate) and "token" (tokenFile); the
  // current context uses the token.
  void WriteKubeconfig() {
    std::ofstream(dir_ + "/kubeconfig")
        << "apiVersion: v1\nkind: Config\ncurrent-context: token\n"
           "clusters:\n- name: standin\n  cluster: {server: 'https://localhost:"
        << port_
        << "', certificate-authority: ca.crt}\n"
           "- name: by-ip\n  cluster: {server: 'https://127.0.0.1:"
        << port_
        << "', certificate-authority: ca.crt, tls-server-name: kube.internal}\n"
           "users:\n- name: token\n  user: {tokenFile: client-token}\n"
           "- name: cert\n  user: {client-certificate: client.crt, client-key: client.key}\n"
           "contexts:\n- name: token\n  context: {cluster: standin, user: token, namespace: ml}\n"
           "- name: cert\n  context: {cluster: by-ip, user: cert, namespace: ml}\n";
  }
  std::string kubeconfig() const { return dir_ + "/kubeconfig"; }
  int port() const { return port_; }
  std::string Log() const { return proc_ ? proc_->Log() : ""; }

  // The stand-in's own endpoints (faults, stats) and plain API calls, as the tests' observer.
  nlohmann::json Control(const std::string& method, const std::string& path,
                         const std::string& body = "{}") {
    if (!control_) {
      control_ = std::make_unique<httplib::SSLClient>("localhost", port_, dir_ + "/client.crt",
                                                      dir_ + "/client.key");
      control_->set_ca_cert_path((dir_ + "/ca.crt").c_str());
      control_->set_tcp_nodelay(true);
      control_->set_keep_alive(true);
    }
    httplib::SSLClient& c = *control_;
    httplib::Headers h = {{"Authorization", "Bearer token-one"}};
    auto r = method == "POST"     ? c.Post(path.c_str(), h, body, "application/json")
             : method == "DELETE" ? c.Delete(path.c_str(), h)
                                  : c.Get(path.c_str(), h);
    if (!r) return nlohmann::json();
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    return j.is_discarded() ? nlohmann::json(r->body) : j;
  }

 private:
  std::string dir_;
  bool client_cert_;
  int port_ = 0;
  std::unique_ptr<Proc> proc_;
  std::unique_ptr<httplib::SSLClient> control_;
  std::string error_;
};

}  // namespace tessera::testing
