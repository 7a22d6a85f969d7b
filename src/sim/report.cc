#include "sim/report.h"

#include <cstdio>
#include <sstream>

#include "common/text.h"

namespace tessera::sim {
namespace {

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string Escape(const std::string& s) {
  return EscapeChars(s, {{'<', "&lt;"}, {'>', "&gt;"}, {'&', "&amp;"}});
}

}  // namespace

std::string FormatTable(const std::string& trace, const std::vector<SeedSweep>& sweeps) {
  std::ostringstream o;
  o << "trace " << trace << ": unallocated GPU % of capacity at arrived % (mean / median / sd";
  if (!sweeps.empty()) o << " over " << sweeps.front().seeds.size() << " seeds";
  o << ")\n";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%-16s", "policy");
  o << buf;
  for (int p : kReportPoints) {
    std::snprintf(buf, sizeof buf, " %21s", (std::to_string(p) + "%").c_str());
    o << buf;
  }
  o << "  time\n";
  for (const SeedSweep& s : sweeps) {
    std::snprintf(buf, sizeof buf, "%-16s", s.policy.c_str());
    o << buf;
    for (int p : kReportPoints) {
      const Stat& st = s.unallocated[p];
      std::snprintf(buf, sizeof buf, " %6.2f / %6.2f / %4.2f", st.mean, st.median, st.sd);
      o << buf;
    }
    std::snprintf(buf, sizeof buf, "  %.1fs", s.seconds);
    o << buf << "\n";
  }
  return o.str();
}

std::string FormatCsv(const std::string& trace, const std::vector<SeedSweep>& sweeps) {
  std::ostringstream o;
  o << "trace,policy,arrived_pct,unalloc_mean,unalloc_median,unalloc_sd,n_seeds\n";
  for (const SeedSweep& s : sweeps) {
    for (int p = 0; p <= kMaxArrivedPct; ++p) {
      const Stat& st = s.unallocated[p];
      o << trace << ',' << s.policy << ',' << p << ',' << Fixed(st.mean, 4) << ','
        << Fixed(st.median, 4) << ',' << Fixed(st.sd, 4) << ',' << s.seeds.size() << '\n';
    }
  }
  return o.str();
}

std::string RenderSvg(const std::string& title, const std::vector<SeedSweep>& sweeps) {
  // Plot area: x = arrived 0..130 %, y = unallocated 0..100 %.
  const double W = 820, H = 520, left = 70, right = 190, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  auto X = [&](double arrived) { return left + pw * arrived / 130.0; };
  auto Y = [&](double unalloc) { return top + ph * (1.0 - unalloc / 100.0); };
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                  "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << ' ' << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">"
    << Escape(title) << "</text>\n";
  for (int a = 0; a <= 130; a += 10) {
    o << "<line x1=\"" << X(a) << "\" y1=\"" << top << "\" x2=\"" << X(a) << "\" y2=\"" << top + ph
      << "\" stroke=\"#eee\"/>\n";
    o << "<text x=\"" << X(a) << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\">" << a
      << "</text>\n";
  }
  for (int u = 0; u <= 100; u += 10) {
    o << "<line x1=\"" << left << "\" y1=\"" << Y(u) << "\" x2=\"" << left + pw << "\" y2=\""
      << Y(u) << "\" stroke=\"#eee\"/>\n";
    o << "<text x=\"" << left - 8 << "\" y=\"" << Y(u) + 4 << "\" text-anchor=\"end\">" << u
      << "</text>\n";
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 15
    << "\" text-anchor=\"middle\">arrived workload (% of cluster GPU capacity)</text>\n";
  o << "<text transform=\"translate(18," << top + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">unallocated GPU (% of capacity)</text>\n";
  // Ideal: everything that arrived is allocated, until the cluster is full.
  o << "<polyline fill=\"none\" stroke=\"#999\" stroke-dasharray=\"5,4\" points=\"" << X(0) << ','
    << Y(100) << ' ' << X(100) << ',' << Y(0) << ' ' << X(130) << ',' << Y(0) << "\"/>\n";
  double ly = top + 10;
  o << "<line x1=\"" << left + pw + 15 << "\" y1=\"" << ly << "\" x2=\"" << left + pw + 40
    << "\" y2=\"" << ly << "\" stroke=\"#999\" stroke-dasharray=\"5,4\"/><text x=\""
    << left + pw + 46 << "\" y=\"" << ly + 4 << "\">ideal</text>\n";
  for (size_t i = 0; i < sweeps.size(); ++i) {
    const char* color = kColors[i % 8];
    o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.8\" points=\"";
    for (int p = 0; p <= kMaxArrivedPct; ++p) {
      o << Fixed(X(p), 1) << ',' << Fixed(Y(sweeps[i].unallocated[p].mean), 1) << ' ';
    }
    o << "\"/>\n";
    ly += 20;
    const Stat& at100 = sweeps[i].unallocated[100];
    o << "<line x1=\"" << left + pw + 15 << "\" y1=\"" << ly << "\" x2=\"" << left + pw + 40
      << "\" y2=\"" << ly << "\" stroke=\"" << color << "\" stroke-width=\"2\"/><text x=\""
      << left + pw + 46 << "\" y=\"" << ly + 4 << "\">" << Escape(sweeps[i].policy) << " ("
      << Fixed(at100.mean, 2) << "% @100)</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace tessera::sim
