;;; forj-install.el --- Build the forj worker for an installed package  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; A forj installed as Emacs packages are (`package-vc-install',
;; `use-package' :vc, a clone on `load-path') has its Python worker's
;; sources but no Python environment to run them in.
;; `forj-install-worker' builds one: a virtual environment in the
;; user's data directory (`forj-install-directory'; never inside the
;; package directory, which package managers replace on upgrade), with
;; the worker and its dependencies installed by pip from the package's
;; own pyproject.toml.  It runs asynchronously, step by step, its output
;; in the buffer *forj-install* and its progress in the mode line.
;; When a piece is missing (Python older than 3.10, no `venv' or
;; `ensurepip' module, no way to reach the package index) it stops and
;; says which, and what to do.
;;
;; It works on the host of `default-directory': a TRAMP directory gets
;; the worker built on that remote host, in that host's data directory,
;; through `make-process' with a file handler.  `forj-install-python'
;; tells where the worker's Python is on a host, if it is built.
;;
;; The new environment is built beside the old one and takes its place
;; only once the worker imports and reports this package's version, so
;; a failed rebuild leaves the previous worker as it was.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)

(defcustom forj-install-directory nil
  "Where `forj-install-worker' builds the worker's Python environment.
nil means the directory \"forj\" in the user's data directory:
$XDG_DATA_HOME/forj, or ~/.local/share/forj when XDG_DATA_HOME is not
set, on this machine; ~/.local/share/forj on a remote host.  A
directory name is used on every host, as that host's local name."
  :type '(choice (const :tag "The user's data directory" nil)
                 (directory :tag "Directory"))
  :group 'forj)

(defcustom forj-install-base-python "python3"
  "The Python that `forj-install-worker' builds the environment with.
A command name looked up on the host's PATH, or an absolute file name
there.  It must be Python 3.10 or newer, with its `venv' and
`ensurepip' modules."
  :type 'string
  :group 'forj)

(defcustom forj-install-extras '("ast" "mcp")
  "The worker's optional parts `forj-install-worker' installs.
\"ast\": the syntax-tree tools (tree-sitter and its grammars);
\"mcp\": serving forj's tools to other agents over MCP."
  :type '(repeat string)
  :group 'forj)

(defvar forj-install-finished-functions nil
  "Functions called when `forj-install-worker' has built a worker.
Each is called with the directory the build was for (its host is the
worker's host) and the worker's Python, as that host's local name.")

(defconst forj-install-minimum-python '(3 10)
  "The oldest Python the worker runs on (pyproject.toml's requires-python).")

(defvar forj-install--file (or load-file-name buffer-file-name)
  "This file, as it was loaded: the package's Python sources are beside it.")

;;; Where things are

(defun forj-install-package-directory ()
  "The directory holding the package's pyproject.toml and forj_py, or nil.
A package installed from forj's repository holds the whole repository,
the Elisp in its elisp/ directory; a flat package holds them beside
the Elisp files.  Both are looked for."
  (let ((here (and forj-install--file (file-name-directory forj-install--file))))
    (when here
      (cl-find-if (lambda (dir)
                    (and (file-exists-p (expand-file-name "pyproject.toml" dir))
                         (file-exists-p (expand-file-name "forj_py/__main__.py" dir))))
                  (list (file-name-directory (directory-file-name here)) here)))))

(defun forj-install--prefix (directory)
  "The TRAMP prefix of DIRECTORY, or \"\" for a local one."
  (or (file-remote-p (or directory default-directory)) ""))

(defun forj-install-data-directory (&optional directory)
  "The directory the worker is built in, on the host of DIRECTORY.
DIRECTORY defaults to `default-directory'; the result carries its TRAMP
prefix when it is remote."
  (let ((prefix (forj-install--prefix directory)))
    (file-name-as-directory
     (expand-file-name
      (concat prefix
              (cond ((default-value 'forj-install-directory)
                     (file-local-name (default-value 'forj-install-directory)))
                    ((and (string-empty-p prefix) (getenv "XDG_DATA_HOME")
                          (file-name-absolute-p (getenv "XDG_DATA_HOME")))
                     (expand-file-name "forj" (getenv "XDG_DATA_HOME")))
                    (t "~/.local/share/forj")))))))

(defun forj-install--venv (directory)
  "The worker's environment on the host of DIRECTORY, with its TRAMP prefix."
  (expand-file-name "venv/" (forj-install-data-directory directory)))

(defun forj-install-python (&optional directory)
  "The built worker's Python on the host of DIRECTORY, or nil if none is built.
DIRECTORY defaults to `default-directory'.  The result is that host's
local file name: a TRAMP directory gives the remote name without its
prefix."
  (let ((python (expand-file-name "bin/python" (forj-install--venv directory))))
    (and (file-executable-p python) (file-local-name python))))

;;; Progress

(defvar forj-install--mode-line nil
  "The build's progress in the mode line, or nil when none runs.")
(put 'forj-install--mode-line 'risky-local-variable t)

;; A cloned .dir-locals.el must not choose the program the build runs or
;; where it writes: only the options' global values are read.
(dolist (option '(forj-install-directory forj-install-base-python forj-install-extras))
  (put option 'risky-local-variable t))

(defvar forj-install--jobs (make-hash-table :test #'equal)
  "Host prefix (\"\" for this machine) -> the build running there.")

(defconst forj-install-buffer "*forj-install*"
  "The buffer the build's commands write to.")

(cl-defstruct (forj-install--job (:constructor forj-install--job-make) (:copier nil))
  "One build of the worker on one host."
  (directory nil :documentation "The `default-directory' the build runs in.")
  (steps nil :documentation "The steps still to run: (LABEL FUNCTION) lists.")
  (total 0 :documentation "How many steps there are.")
  (done 0 :documentation "How many have finished.")
    (callback nil :documentation "Called with the Python, or nil and the error text."))

(defun forj-install--progress (job label)
  "Show that JOB is at the step LABEL."
  (setq forj-install--mode-line
        (format " forj-install[%d/%d %s]"
                (1+ (forj-install--job-done job)) (forj-install--job-total job) label))
  (unless (memq 'forj-install--mode-line global-mode-string)
    (setq global-mode-string (append global-mode-string '(forj-install--mode-line))))
  (force-mode-line-update t)
  (message "forj: building the worker (%d/%d): %s…"
           (1+ (forj-install--job-done job)) (forj-install--job-total job) label))

(defun forj-install--log (format-string &rest args)
  "Append FORMAT-STRING formatted with ARGS as a line to the build's buffer."
  (with-current-buffer (get-buffer-create forj-install-buffer)
    (let ((inhibit-read-only t))
      (goto-char (point-max))
      (insert (apply #'format format-string args) "\n"))))

;;; The steps

(defconst forj-install--check-code
  (concat "exec(\"import sys\\nprint('forj-python %d.%d.%d' % tuple(sys.version_info[:3]))\\n"
          "for m in ('venv', 'ensurepip'):\\n"
          " try:\\n  __import__(m); r = 'yes'\\n"
          " except ImportError:\\n  r = 'no'\\n"
          " print('forj-module ' + m + ' ' + r)\")")
  "Python that prints its version and whether it has `venv' and `ensurepip'.
One line, with the newlines escaped, so every shell and TRAMP passes it
unchanged, and old enough in its syntax that any Python runs it.")

(defun forj-install--run (job label command on-success)
  "Run COMMAND (a list) as JOB's step LABEL; then ON-SUCCESS with its output.
The command runs on the host of JOB's directory.  A failure ends the
build with what `forj-install--diagnose' makes of its output."
  (forj-install--progress job label)
  (forj-install--log "\n;; %s: %s\n$ %s" (format-time-string "%T") label
                     (mapconcat #'shell-quote-argument command " "))
  (let* ((buffer (get-buffer-create forj-install-buffer))
         (default-directory (forj-install--job-directory job))
         (start (with-current-buffer buffer (point-max))))
    (condition-case err
        (make-process
         :name "forj-install" :buffer buffer :command command
         :connection-type 'pipe :noquery t :file-handler t
         :sentinel
         (lambda (process _event)
           (unless (process-live-p process)
             (let ((output (with-current-buffer buffer
                             (buffer-substring-no-properties start (point-max))))
                   (status (process-exit-status process)))
               (if (and (eq (process-status process) 'exit) (eq status 0))
                   (condition-case err
                       (progn
                         (cl-incf (forj-install--job-done job))
                         (funcall on-success output))
                     (error (forj-install--finish job nil (error-message-string err))))
                 (forj-install--finish
                  job nil (forj-install--diagnose job label command status output)))))))
      (file-missing
       (forj-install--finish job nil (forj-install--no-python job (error-message-string err))))
      (error
       (forj-install--finish job nil (format "cannot run %s: %s" (car command)
                                             (error-message-string err)))))))

(defun forj-install--host (job)
  "How the messages name JOB's host."
  (let ((prefix (forj-install--prefix (forj-install--job-directory job))))
    (if (string-empty-p prefix) "this machine" (string-remove-suffix ":" prefix))))

(defun forj-install--no-python (job detail)
  "The error for a base Python that JOB could not run, with DETAIL."
  (format "no Python to build the worker with: `%s' cannot run on %s (%s).  Install Python %s or newer with its venv module (Debian/Ubuntu: apt install python3 python3-venv), or set `forj-install-base-python' to one, then M-x forj-install-worker again"
          (default-value 'forj-install-base-python) (forj-install--host job) detail
          (mapconcat #'number-to-string forj-install-minimum-python ".")))

(defun forj-install--network-p (output)
  "Return non-nil if pip could not reach the package index, going by its OUTPUT."
  (string-match-p
   (regexp-opt '("Failed to establish a new connection" "Temporary failure in name resolution"
                 "Name or service not known" "Network is unreachable" "Connection refused"
                 "ConnectTimeoutError" "Read timed out" "ProxyError" "Max retries exceeded"
                 "No route to host" "Could not fetch URL"
                 ;; What pip says when no index answered with any version
                 ;; (its connection warnings come only when it retries).
                 "(from versions: none)"))
   output))

(defun forj-install--diagnose (job label command status output)
  "The error for JOB's step LABEL: COMMAND exited with STATUS, printing OUTPUT."
  (let* ((lines (split-string output "\n" t "[ \t\r]+"))
         ;; pip's first ERROR line is the cause; what follows repeats it.
         (last (or (cl-find-if (lambda (line) (string-prefix-p "ERROR: " line)) lines)
                   (car (last lines)))))
    (cond
     ;; A remote shell's "command not found".
     ((and (equal label "checking Python") (eq status 127))
      (forj-install--no-python job (or last "command not found")))
     ((string-match-p "ensurepip is not available\\|No module named ensurepip" output)
      (forj-install--no-venv job))
     ((and (equal label "installing the worker with pip") (forj-install--network-p output))
      (format "pip could not reach the package index, or it has no version of what the worker needs (%s).  Check the network or proxy of %s (pip honours HTTPS_PROXY, and PIP_INDEX_URL for a mirror), then M-x forj-install-worker again; pip's output is in %s"
              (or last "no connection") (forj-install--host job) forj-install-buffer))
     (t
      (format "%s failed (%s exited with %s: %s); its output is in %s"
              label (car command) status (or last "no output") forj-install-buffer)))))

(defun forj-install--no-venv (job)
  "The error for a base Python of JOB without `venv' or `ensurepip'."
  (format "%s on %s has no venv/ensurepip module, which building the worker's environment needs.  Install it (Debian/Ubuntu: apt install python3-venv; Fedora: dnf install python3), or set `forj-install-base-python' to a Python that has it, then M-x forj-install-worker again"
          (default-value 'forj-install-base-python) (forj-install--host job)))

(defun forj-install--check (job output)
  "Stop JOB unless OUTPUT is from a recent enough Python with venv and ensurepip."
  (let ((version (and (string-match "^forj-python \\([0-9]+\\)\\.\\([0-9]+\\)\\.\\([0-9]+\\)" output)
                      (list (string-to-number (match-string 1 output))
                            (string-to-number (match-string 2 output))
                            (string-to-number (match-string 3 output))))))
    (cond
     ((null version)
      (error "%s did not say which Python it is; see %s" (default-value 'forj-install-base-python)
             forj-install-buffer))
     ((version-list-< (list (nth 0 version) (nth 1 version)) forj-install-minimum-python)
      (error "The worker needs Python %s or newer; %s on %s is %s.  Install a newer Python (e.g. python3.12) and set `forj-install-base-python' to it, then M-x forj-install-worker again"
             (mapconcat #'number-to-string forj-install-minimum-python ".")
             (default-value 'forj-install-base-python) (forj-install--host job)
             (mapconcat #'number-to-string version ".")))
     ((string-match-p "^forj-module \\(venv\\|ensurepip\\) no" output)
      (error "%s" (forj-install--no-venv job))))))

(defun forj-install--source-archive (target)
  "Pack the package's worker sources as an sdist archive into TARGET's directory.
TARGET is the archive's file name (with a TRAMP prefix for a remote
host).  The archive, not the package directory, is what pip builds
from, so nothing is written into the package directory, and a remote
host gets the sources in one copy."
  (let ((source (forj-install-package-directory))
        (stage (make-temp-file "forj-install-" t)))
    (unless source
      (error "No pyproject.toml and forj_py beside forj's Elisp files (in %s or its parent): install forj from its repository (package-vc-install, or a clone on `load-path'), which holds the worker's sources"
             (file-name-directory forj-install--file)))
    (unless (executable-find "tar")
      (error "The program tar is needed to pack the worker's sources; install it"))
    (unwind-protect
        (let ((top (expand-file-name (format "forj-%s" forj-version) stage))
              (archive (expand-file-name "forj.tar.gz" stage)))
          (make-directory top)
          ;; Links, dereferenced by tar -h: nothing is copied twice.
          (dolist (name '("pyproject.toml" "README.md" "forj_py"))
            (when (file-exists-p (expand-file-name name source))
              (make-symbolic-link (directory-file-name (expand-file-name name source))
                                  (expand-file-name name top))))
          (with-temp-buffer
            (unless (eq 0 (call-process "tar" nil t nil "-h" "--exclude=__pycache__"
                                        "-czf" archive "-C" stage (file-name-nondirectory top)))
              (error "Could not pack the worker's sources: %s" (string-trim (buffer-string)))))
          (make-directory (file-name-directory target) t)
          (copy-file archive target t))
      (delete-directory stage t))))

(defun forj-install--steps (directory)
  "Return what to run, in order, to build the worker on the host of DIRECTORY."
  (let* ((data (forj-install-data-directory directory))
         (venv (forj-install--venv directory))
         (new (expand-file-name "venv.new/" data))
         (new-python (file-local-name (expand-file-name "bin/python" new)))
         (archive (expand-file-name (format "forj-%s.tar.gz" forj-version) data)))
    (list
     (list "checking Python"
           (lambda (job next)
             (forj-install--run job "checking Python"
                                (list (default-value 'forj-install-base-python) "-c" forj-install--check-code)
                                (lambda (output) (forj-install--check job output)
                                  (funcall next)))))
     (list "creating the environment"
           (lambda (job next)
             (forj-install--source-archive archive)
             (when (file-exists-p new) (delete-directory new t))
             (forj-install--run job "creating the environment"
                                (list (default-value 'forj-install-base-python) "-m" "venv"
                                      (directory-file-name (file-local-name new)))
                                (lambda (_output) (funcall next)))))
     (list "installing the worker with pip"
           (lambda (job next)
             (forj-install--run job "installing the worker with pip"
                                (list new-python "-m" "pip" "install"
                                      "--disable-pip-version-check" "--progress-bar" "off"
                                      (format "forj%s @ file://%s"
                                              (if (default-value 'forj-install-extras)
                                                  (format "[%s]" (string-join (default-value 'forj-install-extras) ","))
                                                "")
                                              (file-local-name archive)))
                                (lambda (_output) (funcall next)))))
     (list "checking the worker"
           (lambda (job next)
             (forj-install--run
              job "checking the worker"
              (list new-python "-c" "import forj_py; print('forj-version ' + forj_py.__version__)")
              (lambda (output)
                (unless (string-match-p (concat "^forj-version " (regexp-quote forj-version) "$")
                                        output)
                  (error "The built worker is not version %s (it says %s); see %s"
                         forj-version (string-trim output) forj-install-buffer))
                ;; Only now does the new environment replace the old one.
                ;; The worker runs as `python -m', never through the
                ;; scripts whose first line names the old path.
                (when (file-exists-p venv) (delete-directory venv t))
                (rename-file (directory-file-name new) (directory-file-name venv))
                (delete-file archive)
                (funcall next))))))))

(defun forj-install--next (job)
  "Run JOB's next step, or finish it."
  (let ((step (pop (forj-install--job-steps job))))
    (if step
        (condition-case err
            (funcall (nth 1 step) job (lambda () (forj-install--next job)))
          (error (forj-install--finish job nil (error-message-string err))))
      (forj-install--finish job (forj-install-python (forj-install--job-directory job)) nil))))

(defun forj-install--finish (job python failure)
  "End JOB: it built PYTHON, or it stopped with the text FAILURE."
  (let ((directory (forj-install--job-directory job)))
    (remhash (forj-install--prefix directory) forj-install--jobs)
    (when (= 0 (hash-table-count forj-install--jobs))
      (setq forj-install--mode-line nil)
      (force-mode-line-update t))
    (if python
        (progn
          (forj-install--log ";; %s: the worker is ready: %s" (format-time-string "%T") python)
          (message "forj: the worker is built (%s)" python)
          (run-hook-with-args 'forj-install-finished-functions directory python))
      (forj-install--log ";; %s: stopped: %s" (format-time-string "%T") failure)
      (message "forj: could not build the worker: %s" failure))
    (when (forj-install--job-callback job)
      (funcall (forj-install--job-callback job) python failure))))

;;; Commands

;;;###autoload
(defun forj-install-worker (&optional directory callback)
  "Build forj's worker in the data directory of the host of DIRECTORY.
DIRECTORY defaults to `default-directory'; a TRAMP directory builds it
on that remote host.  The build checks `forj-install-base-python',
makes a virtual environment in `forj-install-data-directory' and has
pip install the worker from this package's pyproject.toml, with its
dependencies from the package index.  It runs in the background: its
output is in the buffer *forj-install*, its progress in the mode line.
A worker built before is replaced once the new one works, and workers
of an older version are stopped, so the next call starts the new one.
CALLBACK, if given, is called with the worker's Python (that host's
local name) when the build succeeds, or with nil and the error text."
  (interactive)
  (let* ((directory (file-name-as-directory (expand-file-name (or directory default-directory))))
         (prefix (forj-install--prefix directory)))
    (when (gethash prefix forj-install--jobs)
      (user-error "forj: a build of the worker already runs on %s; see %s"
                  (if (string-empty-p prefix) "this machine" prefix) forj-install-buffer))
    (let* ((steps (forj-install--steps directory))
           (job (forj-install--job-make :directory directory :steps steps
                                        :total (length steps) :callback callback)))
      (puthash prefix job forj-install--jobs)
      (forj-install--log "\n;; %s: building forj's worker %s in %s"
                         (format-time-string "%F %T") forj-version
                         (forj-install-data-directory directory))
      (when (called-interactively-p 'interactive)
        (display-buffer forj-install-buffer))
      (forj-install--next job)
      job)))

(defun forj-install-running-p (&optional directory)
  "Return non-nil if the worker is being built on the host of DIRECTORY."
  (and (gethash (forj-install--prefix directory) forj-install--jobs) t))

(provide 'forj-install)
;;; forj-install.el ends here
