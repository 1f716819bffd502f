// harnessCheck.h — the harness's bookkeeping: one PASS/FAIL line per check, counted for the final summary.
#pragma once

#include <cstdio>
#include <string>

namespace wtconv_harness
{
// ---------------------------------------------------------------------------------------------------
// Bookkeeping

inline int gPassed = 0;
inline int gFailed = 0;

inline bool check(bool ok, std::string const& what, std::string const& detail = "")
{
    if (ok)
    {
        ++gPassed;
        std::printf("PASS %s\n", what.c_str());
    }
    else
    {
        ++gFailed;
        std::printf("FAIL %s%s%s\n", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    }
    std::fflush(stdout);
    return ok;
}

inline bool contains(std::string const& haystack, std::string const& needle)
{
    return haystack.find(needle) != std::string::npos;
}

} // namespace wtconv_harness
