// pinfer-cli's link to the Python package: one co-process running pinfer.cli_helper,
// so that the CLI renders chat templates with the same Jinja code as pinfer.Llama and
// constrains output with the same grammar engine (llguidance). The protocol is in
// python/pinfer/cli_helper.py.
//
// The interpreter: $PINFER_PYTHON, else python3 beside this executable (a venv's bin/),
// else python3 on PATH. A development build (the extension _core*.so beside this
// executable) imports the package from the source tree with that extension.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

class python_helper {
  public:
    ~python_helper() { stop(); }

    // Starts the co-process if needed; false with why() set if it cannot run.
    bool start() {
        if (pid_ > 0) return true;
        if (failed_) return false;
        std::string exe_dir = ".";
        char buf[4096];
        const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
        if (n > 0) {
            std::string e(buf, (size_t)n);
            exe_dir = e.substr(0, e.find_last_of('/'));
        }
        std::string py;
        if (const char *env = getenv("PINFER_PYTHON"); env && *env) py = env;
        else if (access((exe_dir + "/python3").c_str(), X_OK) == 0) py = exe_dir + "/python3";
        else py = "python3";
        std::string so = find_core(exe_dir);
        static const char *boot =
            "import sys, importlib.util\n"
            "src, so = sys.argv[1], sys.argv[2]\n"
            "if so:\n"
            "    sys.path.insert(0, src + '/python')\n"
            "    spec = importlib.util.spec_from_file_location('pinfer._core', so)\n"
            "    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
            "    sys.modules['pinfer._core'] = mod\n"
            "from pinfer.cli_helper import main\n"
            "sys.exit(main())\n";
#ifdef PINFER_SOURCE_DIR
        const std::string src = PINFER_SOURCE_DIR;
#else
        const std::string src;
#endif
        int to[2], from[2], err[2];
        if (pipe(to) != 0 || pipe(from) != 0 || pipe(err) != 0) return fail("cannot create pipes");
        pid_ = fork();
        if (pid_ < 0) return fail("cannot fork");
        if (pid_ == 0) {
            dup2(to[0], 0);
            dup2(from[1], 1);
            dup2(err[1], 2);
            for (int fd : {to[0], to[1], from[0], from[1], err[0], err[1]}) close(fd);
            signal(SIGINT, SIG_IGN);  // Ctrl-C is the CLI's to handle, not the helper's
            execlp(py.c_str(), py.c_str(), "-c", boot, src.c_str(), so.c_str(), (char *)nullptr);
            _exit(127);
        }
        close(to[0]);
        close(from[1]);
        close(err[1]);
        to_ = fdopen(to[1], "wb");
        from_ = fdopen(from[0], "rb");
        err_fd_ = err[0];
        python_ = py;
        return true;
    }

    // One request; false with why() set on an error (the helper's message, or that it died).
    bool call(const std::vector<std::string> &req, std::vector<std::string> &reply) {
        if (!start()) return false;
        std::string msg = std::to_string(req.size()) + "\n";
        for (const std::string &f : req) msg += std::to_string(f.size()) + "\n" + f;
        if (fwrite(msg.data(), 1, msg.size(), to_) != msg.size() || fflush(to_) != 0) return died();
        char line[64];
        if (!fgets(line, sizeof line, from_)) return died();
        const bool ok = strncmp(line, "OK", 2) == 0;
        if (!fgets(line, sizeof line, from_)) return died();
        const long nf = strtol(line, nullptr, 10);
        reply.clear();
        for (long i = 0; i < nf; i++) {
            if (!fgets(line, sizeof line, from_)) return died();
            std::string f((size_t)strtoul(line, nullptr, 10), '\0');
            if (!f.empty() && fread(&f[0], 1, f.size(), from_) != f.size()) return died();
            reply.push_back(std::move(f));
        }
        if (!ok) {
            why_ = reply.empty() ? "error" : reply[0];
            return false;
        }
        return true;
    }

    const std::string &why() const { return why_; }
    bool unavailable() const { return failed_; }  // it could not start, or died

    void stop() {
        if (to_) fclose(to_);
        if (from_) fclose(from_);
        if (err_fd_ >= 0) close(err_fd_);
        to_ = from_ = nullptr;
        err_fd_ = -1;
        if (pid_ > 0) {
            int st;
            waitpid(pid_, &st, 0);  // its input closed: it exits
        }
        pid_ = -1;
    }

  private:
    static std::string find_core(const std::string &dir) {
        std::string found;
        if (DIR *d = opendir(dir.c_str())) {
            while (dirent *e = readdir(d)) {
                const std::string name = e->d_name;
                if (name.rfind("_core", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0)
                    found = dir + "/" + name;
            }
            closedir(d);
        }
        return found;
    }
    bool fail(const std::string &w) {
        why_ = w;
        failed_ = true;
        pid_ = -1;
        return false;
    }
    bool died() {
        // Whatever the interpreter said on its way out (a missing package, ...).
        std::string e;
        char b[4096];
        fcntl(err_fd_, F_SETFL, O_NONBLOCK);
        ssize_t k;
        while ((k = read(err_fd_, b, sizeof b)) > 0 && e.size() < 65536) e.append(b, (size_t)k);
        while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
        const size_t last = e.find_last_of('\n');
        why_ = "the Python helper (" + python_ + " -m pinfer.cli_helper) stopped" +
               (e.empty() ? std::string() : ": " + (last == std::string::npos ? e : e.substr(last + 1)));
        stop();
        failed_ = true;
        return false;
    }

    pid_t pid_ = -1;
    FILE *to_ = nullptr, *from_ = nullptr;
    int err_fd_ = -1;
    bool failed_ = false;
    std::string why_, python_;
};
