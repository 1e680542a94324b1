;;; forj-install-test.el --- Building the worker for an installed package  -*- lexical-binding: t; -*-

;;; Commentary:

;; `forj-install-worker' against real Pythons: the one the tests run
;; with, and small stand-ins on PATH that behave as a Python too old
;; for the worker, or one without its venv module, would.  The full
;; build installs the worker from a copy of the checkout laid out as a
;; package directory (no .venv), with pip reaching the package index as
;; `make install' does (its cache makes it quick), then chats through
;; the built worker with the fake provider, and rebuilds a worker whose
;; version no longer matches the Elisp.

;;; Code:

(require 'ert)
(require 'forj-install)
(require 'forj-chat)
(require 'forj-epc-test)
(require 'forj-provider-test)

(defconst forj-install-test--checkout
  (file-name-directory (directory-file-name (file-name-directory
                                             (or load-file-name buffer-file-name))))
  "The forj checkout the tests run from.")

(defmacro forj-install-test-with-host (&rest body)
  "Run BODY with `data' a fresh data directory and `bin' a directory first on PATH.
The build's messages go to a fresh *forj-install* buffer."
  (declare (indent 0) (debug t))
  `(let* ((data (file-name-as-directory (make-temp-file "forj-install-data-" t)))
          (bin (file-name-as-directory (make-temp-file "forj-install-bin-" t)))
          (forj-install-directory data)
          (exec-path (cons bin exec-path))
          (process-environment (cons (concat "PATH=" bin ":" (getenv "PATH")) process-environment)))
     (when (get-buffer forj-install-buffer) (kill-buffer forj-install-buffer))
     (unwind-protect (progn ,@body)
       (delete-directory data t)
       (delete-directory bin t))))

(defun forj-install-test--build (&optional timeout)
  "Build the worker in `default-directory''s host; return (PYTHON FAILURE).
Wait at most TIMEOUT seconds (default 900: pip on a loaded machine)."
  (let (result)
    (forj-install-worker default-directory (lambda (python failure) (setq result (list python failure))))
    (forj-test--wait-for (lambda () result) (or timeout 900))
    (should result)
    (should-not (forj-install-running-p default-directory))
    result))

(defun forj-install-test--fake-python (bin preamble)
  "Write BIN/python3: the real Python, running PREAMBLE before a -c program.
It stands for another Python the way one would answer forj's check."
  (let ((file (expand-file-name "python3" bin)))
    (with-temp-file file
      (insert "#!" (file-truename forj-test--python) "\n"
              "import sys\n"
              preamble "\n"
              "if sys.argv[1:2] != ['-c']:\n"
              "    sys.exit('this stand-in Python runs only -c programs')\n"
              "code = sys.argv[2]\n"
              "sys.argv = ['-c'] + sys.argv[3:]\n"
              "exec(compile(code, '<string>', 'exec'), {'__name__': '__main__'})\n"))
    (set-file-modes file #o755)
    file))

(ert-deftest forj-test-install-python-too-old ()
  "A python3 older than 3.10 stops the build, naming its version and the option to set."
  (forj-install-test-with-host
    (forj-install-test--fake-python bin "sys.version_info = (3, 8, 10, 'final', 0)")
    (pcase-let ((`(,python ,failure) (forj-install-test--build 60)))
      (should-not python)
      (should (string-match-p "needs Python 3.10 or newer; python3 on this machine is 3.8.10" failure))
      (should (string-match-p "forj-install-base-python" failure))
      (should (string-match-p "M-x forj-install-worker again" failure))
      ;; Nothing was built, and the worker still has no Python.
      (should-not (file-exists-p (expand-file-name "venv" data)))
      (should-not (forj-install-python)))))

(ert-deftest forj-test-install-python-without-venv ()
  "A python3 without ensurepip (Debian without python3-venv) stops the build and says what to install."
  (forj-install-test-with-host
    (forj-install-test--fake-python bin "sys.modules['ensurepip'] = None")
    (pcase-let ((`(,python ,failure) (forj-install-test--build 60)))
      (should-not python)
      (should (string-match-p "has no venv/ensurepip module" failure))
      (should (string-match-p "apt install python3-venv" failure))
      (should-not (file-exists-p (expand-file-name "venv" data))))))

(ert-deftest forj-test-install-no-python ()
  "No Python at all: the error says to install one or set the option."
  (forj-install-test-with-host
    (let ((forj-install-base-python (expand-file-name "python3" bin)))
      (pcase-let ((`(,python ,failure) (forj-install-test--build 60)))
        (should-not python)
        (should (string-match-p "no Python to build the worker with" failure))
        (should (string-match-p "apt install python3 python3-venv" failure))))))

(ert-deftest forj-test-install-no-network-to-the-package-index ()
  "pip that cannot reach the package index stops the build with what to check; no worker is left half-built."
  (forj-install-test-with-host
    (let ((forj-install-base-python (file-truename forj-test--python))
          ;; An index on a port nothing listens on, no other index, no
          ;; cache, no retries: the machine as if offline.
          (process-environment
           (append (list "PIP_INDEX_URL=http://127.0.0.1:9/simple" "PIP_CONFIG_FILE=/dev/null"
                         "PIP_NO_CACHE_DIR=1" "PIP_RETRIES=0" "PIP_DEFAULT_TIMEOUT=5"
                         "PIP_FIND_LINKS" "PIP_EXTRA_INDEX_URL" "PIP_CONSTRAINT")
                   process-environment)))
      (pcase-let ((`(,python ,failure) (forj-install-test--build 300)))
        (should-not python)
        (should (string-match-p "pip could not reach the package index" failure))
        (should (string-match-p "HTTPS_PROXY" failure))
        (should-not (forj-install-python))))))

(defun forj-install-test--package ()
  "A copy of the checkout laid out as a package directory: no .venv.
Return the file name its forj-install.el would be loaded from."
  (let ((package (file-name-as-directory (make-temp-file "forj-package-" t))))
    (dolist (name '("pyproject.toml" "README.md"))
      (copy-file (expand-file-name name forj-install-test--checkout) (expand-file-name name package)))
    (dolist (name '("elisp" "forj_py"))
      (copy-directory (expand-file-name name forj-install-test--checkout)
                      (expand-file-name name package) nil t t))
    (expand-file-name "elisp/forj-install.el" package)))

(defun forj-install-test--say (text)
  "Type TEXT at the chat's prompt, send it and wait for the end of the turn."
  (goto-char (point-max))
  (insert text)
  (forj-chat-send)
  (let ((buffer (current-buffer)))
    (should (forj-test--wait-for
             (lambda () (eq (forj-session-state (buffer-local-value 'forj-session buffer)) 'idle))
             60))))

(ert-deftest forj-test-install-worker-then-chat-and-rebuild-after-upgrade ()
  "A package without .venv builds its worker in the data directory, chats through it,
and a worker of another version is noticed at hello and replaced on request."
  (forj-install-test-with-host
    (let* ((forj-install--file (forj-install-test--package))
           (package (file-name-directory (directory-file-name (file-name-directory forj-install--file))))
           (forj-install-base-python (file-truename forj-test--python))
           ;; The syntax-tree tools, not the MCP server: a shorter build.
           (forj-install-extras '("ast")))
      (unwind-protect
          (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
            (make-directory (expand-file-name ".git" root))
            (let ((forj-worker-python nil)
                  (default-directory root))
              ;; Before the build: no worker, and the error says how to get one.
              (should-not (forj-worker-python-available-p root))
              (should (string-match-p "M-x forj-install-worker builds it"
                                      (cadr (should-error (forj-worker-python-executable root)
                                                          :type 'user-error))))
              (pcase-let ((`(,python ,failure) (forj-install-test--build)))
                (should-not failure)
                (should (equal python (expand-file-name "venv/bin/python" data)))
                (should (equal (forj-install-python root) python))
                ;; Nothing was written into the package directory.
                (should-not (file-exists-p (expand-file-name ".venv" package)))
                (should-not (file-exists-p (expand-file-name "build" package)))
                (should-not (directory-files package nil "\\.egg-info\\'"))
                ;; A chat on the project runs the built worker.
                (let* ((spec (forj-provider-test--provider 'openai "text"))
                       (forj-providers (cons (cons (plist-get spec :name) (cddr spec)) forj-providers))
                       (forj-provider (plist-get spec :name))
                       (process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test-1" process-environment))
                       (chat (forj root)))
                  (unwind-protect
                      (with-current-buffer chat
                        (let ((worker (forj-test--worker root)))
                          (should (equal (car (process-command (forj-worker-process worker))) python))
                          (should (equal (plist-get (forj-worker-hello worker) :version) forj-version))
                          (should-not (forj-worker-outdated-p worker)))
                        (forj-install-test--say "Hi")
                        (should (string-match-p "Hello, world" (buffer-string))))
                    (with-current-buffer chat (set-buffer-modified-p nil))
                    (kill-buffer chat)))
                ;; The package is upgraded: the built worker is now older.
                (let ((init (car (file-expand-wildcards
                                  (expand-file-name "venv/lib/python*/site-packages/forj_py/__init__.py" data)))))
                  (with-temp-file init
                    (insert-file-contents init)
                    (should (re-search-forward "^__version__ = \".*\"$" nil t))
                    (replace-match "__version__ = \"0.0.1\"")))
                (forj-worker-stop root)
                (let ((old (forj-test--worker root)))
                  (should (forj-worker-outdated-p old))
                  (should (string-match-p
                           "the worker is forj 0.0.1 but this Emacs runs forj.el .*M-x forj-install-worker rebuilds"
                           (aref (plist-get (forj-worker-hello old) :warnings) 0)))
                  ;; Rebuilt on request: the old worker is stopped, the
                  ;; next one is the new version.
                  (let ((forj-install-extras nil))
                    (should-not (cadr (forj-install-test--build))))
                  (should (forj-test--wait-for
                           (lambda () (not (process-live-p (forj-worker-process old))))
                           30))
                  (should-not (forj-worker-get root))
                  (let ((new (forj-test--worker root)))
                    (should (equal (plist-get (forj-worker-hello new) :version) forj-version))
                    (should-not (forj-worker-outdated-p new)))))))
        (delete-directory package t)))))

(defconst forj-install-test--tramp-method
  '("forj-test-local"
    (tramp-login-program "sh")
    (tramp-login-args (("-i")))
    (tramp-remote-shell "/bin/sh")
    (tramp-remote-shell-args ("-c"))
    (tramp-connection-timeout 10))
  "A TRAMP method whose \"remote\" host is a shell on this machine.")

(ert-deftest forj-test-install-on-a-tramp-host ()
  "From a TRAMP directory the build runs on that host, and its Python is named there."
  (require 'tramp)
  (let ((tramp-methods (cons forj-install-test--tramp-method tramp-methods))
        (tramp-verbose 0))
    (forj-install-test-with-host
      (let* ((remote (concat "/forj-test-local::" data))
             (prefix (file-remote-p remote))
             (forj-install-base-python
              (forj-install-test--fake-python bin "sys.version_info = (3, 9, 2, 'final', 0)")))
        (unwind-protect
            (progn
              (should (equal (forj-install-data-directory remote) (concat prefix data)))
              (should-not (forj-install-python remote))
              ;; The check runs through TRAMP, on that host's Python.
              (pcase-let ((`(,python ,failure)
                           (let ((default-directory remote)) (forj-install-test--build 60))))
                (should-not python)
                (should (string-match-p (concat "python3 on " (regexp-quote (string-remove-suffix ":" prefix))
                                                " is 3\\.9\\.2")
                                        failure)))
              (should (string-match-p "3\\.9\\.2" (with-current-buffer forj-install-buffer (buffer-string))))
              ;; A built worker's Python is that host's own file name.
              (make-directory (expand-file-name "venv/bin" remote) t)
              (copy-file forj-install-base-python (expand-file-name "venv/bin/python" remote))
              (should (equal (forj-install-python remote) (expand-file-name "venv/bin/python" data))))
          (tramp-cleanup-all-connections))))))

(ert-deftest forj-test-install-worker-of-another-version-is-noticed-at-hello ()
  "A worker reporting another version than this Elisp's is flagged at hello, in its warnings."
  (forj-test-with-project '(("a.txt" . "a\n"))
    ;; This Elisp as an upgraded package would be, against the worker as it is.
    (let* ((forj-version "9.9.9")
           (worker (forj-test--worker root))
           (warnings (append (plist-get (forj-worker-hello worker) :warnings) nil)))
      (should (forj-worker-outdated-p worker))
      (should (cl-some (lambda (w)
                         (string-match-p "the worker is forj .* but this Emacs runs forj.el 9\\.9\\.9 .*M-x forj-install-worker rebuilds"
                                         w))
                       warnings)))))

(ert-deftest forj-test-install-versions-agree ()
  "forj.el's Version header and `forj-version' are the version the worker reports."
  (with-temp-buffer
    (insert-file-contents (expand-file-name "elisp/forj.el" forj-install-test--checkout))
    (should (re-search-forward "^;; Version: \\(.*\\)$" nil t))
    (should (equal (match-string 1) forj-version)))
  (forj-test-with-project '(("a.txt" . "a\n"))
    (should (equal (plist-get (forj-worker-hello (forj-test--worker root)) :version) forj-version))))

(provide 'forj-install-test)
;;; forj-install-test.el ends here
