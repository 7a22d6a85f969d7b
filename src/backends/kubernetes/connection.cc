#include "backends/kubernetes/connection.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace tessera::backends::kube {
namespace {

namespace fs = std::filesystem;

Result<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument(what + ": cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Str(const YAML::Node& n, const char* key) {
  if (!n.IsMap()) return std::string();
  const YAML::Node v = n[key];
  return v && v.IsScalar() ? v.as<std::string>() : std::string();
}

// A named entry of one file, with the file it came from (relative paths resolve against it).
struct Named {
  YAML::Node body;
  std::string file;
};

// A path from `file`, made absolute against its directory.
std::string Resolve(const std::string& path, const std::string& file) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  return (fs::path(file).parent_path() / path).lexically_normal().string();
}

// `key-data` (base64) or `key` (a file) of `n`, as text; "" when neither is set.
Result<std::string> DataOrFile(const Named& n, const std::string& key, const std::string& where) {
  const std::string data = Str(n.body, (key + "-data").c_str());
  if (!data.empty()) {
    auto d = DecodeBase64(data);
    if (!d.ok()) return Status::InvalidArgument(where + "." + key + "-data: not valid base64");
    return *d;
  }
  const std::string file = Str(n.body, key.c_str());
  if (file.empty()) return std::string();
  return ReadFile(Resolve(file, n.file), where + "." + key);
}

}  // namespace

Result<std::string> DecodeBase64(const std::string& text) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos || padding) return Status::InvalidArgument("not valid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) return Status::InvalidArgument("not valid base64");
  return out;
}

std::vector<std::string> KubeconfigFiles(const std::string& setting) {
  std::string list = setting;
  if (list.empty() && std::getenv("KUBECONFIG") != nullptr) list = std::getenv("KUBECONFIG");
  std::vector<std::string> files;
  std::stringstream ss(list);
  for (std::string f; std::getline(ss, f, ':');) {
    if (!f.empty()) files.push_back(f);
  }
  if (files.empty() && std::getenv("HOME") != nullptr)
    files.push_back(std::string(std::getenv("HOME")) + "/.kube/config");
  return files;
}

Result<Connection> LoadKubeconfigUnguarded(const std::vector<std::string>& files,
                                           const std::string& context);

Result<Connection> LoadKubeconfig(const std::vector<std::string>& files,
                                  const std::string& context) {
  try {
    return LoadKubeconfigUnguarded(files, context);
  } catch (const YAML::Exception& e) {  // an entry of another shape than kubeconfig's
    return Status::InvalidArgument(std::string("kubeconfig: not a valid kubeconfig: ") + e.what());
  }
}

namespace {

// The entries of a list of kubeconfig files, merged as kubectl does: the first file to set
// current-context, and the first entry of each name, win.
struct Merged {
  std::string current;
  std::map<std::string, Named> clusters, users, contexts;
  int read = 0;  // files read
};

// Merges one file's root into m.
Status MergeKubeconfig(const std::string& file, YAML::Node root, Merged* m) {
  if (!root.IsMap()) return Status::Ok();
  if (m->current.empty()) m->current = Str(root, "current-context");
  for (auto [key, into, inner] :
       {std::tuple{"clusters", &m->clusters, "cluster"}, std::tuple{"users", &m->users, "user"},
        std::tuple{"contexts", &m->contexts, "context"}}) {
    const YAML::Node list = root[key];
    if (!list) continue;
    if (!list.IsSequence())
      return Status::InvalidArgument("kubeconfig '" + file + "': " + key + " is not a list");
    for (const YAML::Node& e : list) {
      const std::string name = e.IsMap() ? Str(e, "name") : "";
      if (name.empty())
        return Status::InvalidArgument("kubeconfig '" + file + "': an entry of " + key +
                                       " has no name");
      if (!into->count(name))
        (*into)[name] = Named{e[inner] ? e[inner] : YAML::Node(YAML::NodeType::Map), file};
    }
  }
  return Status::Ok();
}

// Reads and merges the files (a missing one skipped, unless it is the only one).
Status ReadKubeconfigs(const std::vector<std::string>& files, Merged* m) {
  for (const std::string& file : files) {
    std::ifstream probe(file);
    if (!probe) {
      if (files.size() == 1)
        return Status::InvalidArgument("kubeconfig: cannot read '" + file + "'");
      continue;  // kubectl skips missing files of a list
    }
    YAML::Node root;
    try {
      root = YAML::LoadFile(file);
    } catch (const YAML::Exception& e) {
      return Status::InvalidArgument("kubeconfig '" + file + "': not valid YAML: " + e.what());
    }
    ++m->read;
    if (Status st = MergeKubeconfig(file, root, m); !st.ok()) return st;
  }
  return Status::Ok();
}

// The cluster's server, TLS settings and CA into c.
Status ApplyCluster(const Named& cluster, const std::string& cw, Connection* c) {
  c->server = Str(cluster.body, "server");
  if (c->server.empty()) return Status::InvalidArgument(cw + ".server: not set");
  if (c->server.rfind("https://", 0) != 0 && c->server.rfind("http://", 0) != 0) {
    return Status::InvalidArgument(cw + ".server: '" + c->server + "' is not an http(s) URL");
  }
  while (!c->server.empty() && c->server.back() == '/') c->server.pop_back();
  c->insecure = Str(cluster.body, "insecure-skip-tls-verify") == "true";
  c->tls_server_name = Str(cluster.body, "tls-server-name");
  auto ca = DataOrFile(cluster, "certificate-authority", cw);
  if (!ca.ok()) return ca.status();
  c->ca_pem = *ca;
  return Status::Ok();
}

// The user's credentials into c: a client certificate and key, a token or a token file.
Status ApplyUser(const Named& user, const std::string& uw, Connection* c) {
  auto cert = DataOrFile(user, "client-certificate", uw);
  if (!cert.ok()) return cert.status();
  auto key = DataOrFile(user, "client-key", uw);
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty())
    return Status::InvalidArgument(
        uw + ": a client certificate needs its key and the key its certificate");
  c->client_cert_pem = *cert;
  c->client_key_pem = *key;
  c->token = Str(user.body, "token");
  c->token_file = Resolve(Str(user.body, "tokenFile"), user.file);
  if (!c->token_file.empty()) {
    std::ifstream t(c->token_file);
    if (!t) return Status::InvalidArgument(uw + ".tokenFile: cannot read '" + c->token_file + "'");
  }
  YAML::Node body = user.body;  // a handle on the entry: looked up as a non-const node
  if (body["exec"] || body["auth-provider"]) {
    return Status::InvalidArgument(uw +
                                   ": exec and auth-provider credentials are not supported (use a "
                                   "token, tokenFile or client certificate)");
  }
  return Status::Ok();
}

}  // namespace

Result<Connection> LoadKubeconfigUnguarded(const std::vector<std::string>& files,
                                           const std::string& context) {
  if (files.empty()) return Status::InvalidArgument("kubeconfig: no file named");
  Merged m;
  if (Status st = ReadKubeconfigs(files, &m); !st.ok()) return st;
  if (m.read == 0) return Status::InvalidArgument("kubeconfig: none of the files can be read");
  const std::string ctx_name = context.empty() ? m.current : context;
  if (ctx_name.empty())
    return Status::InvalidArgument("kubeconfig: no current-context and no context named");
  auto ctx = m.contexts.find(ctx_name);
  if (ctx == m.contexts.end())
    return Status::InvalidArgument("kubeconfig: no context '" + ctx_name + "'");
  const std::string cluster_name = Str(ctx->second.body, "cluster");
  const std::string user_name = Str(ctx->second.body, "user");
  auto cl = m.clusters.find(cluster_name);
  if (cl == m.clusters.end()) {
    return Status::InvalidArgument("kubeconfig: context '" + ctx_name + "' names cluster '" +
                                   cluster_name + "', which no file defines");
  }
  Connection c;
  c.source = "kubeconfig " + ctx->second.file + " (context " + ctx_name + ")";
  c.ns = Str(ctx->second.body, "namespace");
  const std::string cw = "kubeconfig clusters[" + cluster_name + "]";
  if (Status st = ApplyCluster(cl->second, cw, &c); !st.ok()) return st;
  if (!user_name.empty()) {
    auto us = m.users.find(user_name);
    if (us == m.users.end()) {
      return Status::InvalidArgument("kubeconfig: context '" + ctx_name + "' names user '" +
                                     user_name + "', which no file defines");
    }
    const std::string uw = "kubeconfig users[" + user_name + "]";
    if (Status st = ApplyUser(us->second, uw, &c); !st.ok()) return st;
  }
  return c;
}

Result<Connection> LoadInCluster(const std::string& dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return Status::InvalidArgument(
        "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not running "
        "in a pod?)");
  }
  Connection c;
  c.source = "in-cluster";
  const std::string h = host;
  c.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  c.token_file = dir + "/token";
  std::ifstream t(c.token_file);
  if (!t)
    return Status::InvalidArgument("in-cluster: cannot read the service account token '" +
                                   c.token_file + "'");
  auto ca = ReadFile(dir + "/ca.crt", "in-cluster");
  if (!ca.ok()) return ca.status();
  c.ca_pem = *ca;
  std::ifstream ns(dir + "/namespace");
  if (ns) std::getline(ns, c.ns);
  return c;
}

}  // namespace tessera::backends::kube
