;;; forj-worker.el --- Start, greet and restart the forj worker  -*- lexical-binding: t; -*-

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

;; One worker process per project root.  `forj-worker-ensure' starts it
;; lazily (python -m forj_py --root ROOT --token-stdin, with a fresh
;; random token as the first line of its stdin, and without the
;; variables of Emacs's environment named like secrets: see
;; `forj-worker-secret-variables'), reads its port from the first line of its stdout,
;; connects with forj-epc.el and says hello; everything asynchronously,
;; so Emacs never waits.  The worker's stderr goes to a log buffer
;; (`forj-worker-log').  When a worker dies the user is told in one
;; line, and the next `forj-worker-ensure' starts a new one, after a
;; growing pause if workers keep dying young, so a worker that cannot
;; start does not spin.  Workers die with Emacs: they watch their stdin
;; and their parent.

;;; Code:

(require 'cl-lib)
(require 'project)
(require 'subr-x)
(require 'forj)
(require 'forj-epc)
(require 'forj-install)

(declare-function forj-remote-make-process "forj-remote" (root log))
(declare-function forj-remote-hello "forj-remote" (root hello))
(declare-function forj-remote-worker-available-p "forj-remote" (root))

;;; Options

(defcustom forj-worker-python nil
  "The Python interpreter that runs the worker.
nil means the .venv of the forj checkout this file was loaded from, if
it has one, else the worker `forj-install-worker' built in the user's
data directory."
  :type '(choice (const :tag "Automatic" nil)
                 (file :tag "Python executable"))
  :group 'forj)

(defcustom forj-worker-arguments nil
  "Extra command-line arguments for the worker, e.g. (\"--config\" \"FILE\")."
  :type '(repeat string)
  :group 'forj)

(defcustom forj-worker-start-timeout 30
  "Seconds to wait for a starting worker to print its port and say hello."
  :type 'number
  :group 'forj)

;;;; Limits passed to the worker

;; Each of these mirrors a key of the worker's TOML configuration.  nil
;; (the default) leaves the key to the configuration files; a value is
;; sent when the worker starts and counts as the user's own file.  Only
;; the global value is sent, never a buffer-local one, and none of them
;; is a safe local variable: a cloned .dir-locals.el cannot change them.

(defgroup forj-worker-limits nil
  "Time limits and size caps of forj's tools, passed to the worker.
Each option left at nil uses the configuration files instead."
  :group 'forj)

(defcustom forj-worker-default-timeout nil
  "Seconds a tool without a time limit of its own may run.
Mirrors [tools.timeouts] default_seconds (30); nil uses the config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (number :tag "Seconds"))
  :group 'forj-worker-limits)

(defcustom forj-worker-file-timeout nil
  "Seconds a file tool (read, list, search, edit) may run.
Mirrors [tools.timeouts] file_operations_seconds (30); nil uses the
config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (number :tag "Seconds"))
  :group 'forj-worker-limits)

(defcustom forj-worker-shell-timeout nil
  "Seconds a command (run_shell, run_tests) may run.
Mirrors [tools.timeouts] shell_commands_seconds (300); nil uses the
config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (number :tag "Seconds"))
  :group 'forj-worker-limits)

(defcustom forj-worker-max-output-bytes nil
  "Bytes of JSON one tool result may take (1024 to 8 MiB).
Mirrors [tools.output] max_bytes (102400); nil uses the config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (natnum :tag "Bytes"))
  :group 'forj-worker-limits)

(defcustom forj-worker-max-file-read-bytes nil
  "Size of the largest file read_file returns whole; larger ones need a range.
Mirrors [tools.read_file] max_file_read_bytes (204800); nil uses the
config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (natnum :tag "Bytes"))
  :group 'forj-worker-limits)

(defcustom forj-worker-max-scan-bytes nil
  "Bytes a line-range read (or a search, per file) may scan.
Mirrors [tools.read_file] max_scan_bytes (2097152); nil uses the
config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (natnum :tag "Bytes"))
  :group 'forj-worker-limits)

(defcustom forj-worker-max-listing-entries nil
  "Entries list_files and glob return before they stop and say so.
Mirrors [tools.listing] max_entries (5000); nil uses the config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (natnum :tag "Entries"))
  :group 'forj-worker-limits)

(defcustom forj-worker-max-capture-bytes nil
  "Bytes of each output stream of a command kept for its result.
Mirrors [tools.shell] max_capture_bytes (5242880); nil uses the config
file."
  :type '(choice (const :tag "Use the config file" nil)
                 (natnum :tag "Bytes"))
  :group 'forj-worker-limits)

(defcustom forj-worker-max-tool-args-bytes nil
  "Bytes of JSON the arguments of one tool call may take.
Mirrors [tools] max_tool_args_bytes (262144); nil uses the config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (natnum :tag "Bytes"))
  :group 'forj-worker-limits)

(defcustom forj-worker-max-tool-calls-per-batch nil
  "Tool calls of one model message that run; later ones are refused.
Mirrors [tools] max_tool_calls_per_batch (8); nil uses the config file."
  :type '(choice (const :tag "Use the config file" nil)
                 (natnum :tag "Calls"))
  :group 'forj-worker-limits)

(defconst forj-worker--settings
  '((forj-worker-default-timeout . "tools.timeouts.default_seconds")
    (forj-worker-file-timeout . "tools.timeouts.file_operations_seconds")
    (forj-worker-shell-timeout . "tools.timeouts.shell_commands_seconds")
    (forj-worker-max-output-bytes . "tools.output.max_bytes")
    (forj-worker-max-file-read-bytes . "tools.read_file.max_file_read_bytes")
    (forj-worker-max-scan-bytes . "tools.read_file.max_scan_bytes")
    (forj-worker-max-listing-entries . "tools.listing.max_entries")
    (forj-worker-max-capture-bytes . "tools.shell.max_capture_bytes")
    (forj-worker-max-tool-args-bytes . "tools.max_tool_args_bytes")
    (forj-worker-max-tool-calls-per-batch . "tools.max_tool_calls_per_batch"))
  "Each option passed to the worker, and the configuration key it mirrors.")

;; A file or directory may not set them: Emacs asks before applying a
;; risky local variable, and the worker only ever sees global values.
;; The program and its arguments too: a cloned .dir-locals.el could
;; otherwise run another program or name a config file of its own (whose
;; [mcp.servers] would start programs as if the user had listed them).
(dolist (option (cons 'forj-worker-python
                      (cons 'forj-worker-arguments (mapcar #'car forj-worker--settings))))
  (put option 'risky-local-variable t))

(defun forj-worker-settings ()
  "The options sent to the worker: a list of (:key :value :option) plists.
Only options whose global value is non-nil; a buffer-local value is
ignored, whichever buffer starts the worker."
  (let (settings)
    (dolist (entry forj-worker--settings)
      (let ((value (default-value (car entry))))
        (when value
          (push (list :key (cdr entry) :value value :option (symbol-name (car entry)))
                settings))))
    (nreverse settings)))

(defun forj-worker-settings-arguments ()
  "The worker's --settings argument for `forj-worker-settings', or nil."
  (let ((settings (forj-worker-settings)))
    (and settings
         (list "--settings" (json-serialize (vconcat settings))))))

;;; State

(cl-defstruct (forj-worker (:constructor forj-worker--make) (:copier nil))
  "A worker process serving one project root."
  (root nil :documentation "The project root, as an absolute directory name.")
  (process nil :documentation "The worker process.")
  (connection nil :documentation "The `forj-epc-connection', once connected.")
  (token nil :documentation "The secret the worker expects in hello.")
  (hello nil :documentation "The hello reply: root, config, warnings, tools.")
  (started nil :documentation "When the process started (float time).")
  (log-start nil :documentation "Where this worker's output begins in its log buffer.")
  (waiting nil :documentation "Callbacks (SUCCESS . ERROR) waiting for readiness."))

(defconst forj-worker-secret-variables
  '("*_KEY" "*_TOKEN" "*_SECRET" "*_PASSWORD" "*PASSWORD" "*PASSWD" "*_PAT"
    "*APIKEY" "*_AUTH" "*_AUTH_CONFIG" "*_CREDENTIALS" "AWS_*" "ANTHROPIC_*"
    "OPENAI_*" "GEMINI_*" "GOOGLE_API_KEY" "OPENROUTER_*" "*PASS" "*_PASS"
    "*PWD" "*_DSN" "DATABASE_URL" "FORJ_TOKEN")
  "Names of environment variables the worker is started without (globs).
Matched without regard to case; PWD and OLDPWD are kept.  The same list
as the worker's own (forj_py/safety/secretenv.py), which also removes
variables whose value is a credential and those the user's config names,
by starting itself again without them.  Provider keys stay in Emacs,
which alone talks to the providers.")

(defun forj-worker--secret-variable-p (entry)
  "Whether the `process-environment' ENTRY (NAME=VALUE) is named like a secret."
  (let ((name (upcase (car (split-string entry "="))))
        (case-fold-search nil))
    (and (not (member name '("PWD" "OLDPWD")))
         (cl-some (lambda (glob)
                    (string-match-p
                     (concat "\\`" (mapconcat #'regexp-quote (split-string glob "\\*") ".*")
                             "\\'")
                     name))
                  forj-worker-secret-variables))))

(defun forj-worker-environment (&optional environment)
  "Return the environment to start the worker with: Emacs's, without secrets.
ENVIRONMENT, a list like `process-environment', defaults to it."
  (cl-remove-if #'forj-worker--secret-variable-p (or environment process-environment)))

(defvar forj-worker--by-root (make-hash-table :test #'equal)
  "Project root -> `forj-worker'.")

(defvar forj-worker--failures (make-hash-table :test #'equal)
  "Project root -> (COUNT . TIME) of workers that died young, for back-off.")

(defvar forj-worker--stopping (make-hash-table :test #'equal)
  "Project root -> the process of a stopping worker, until it has ended.")

(defconst forj-worker--stop-grace 5.0
  "Seconds a stopping worker has to finish its journal before it is killed.")

(defconst forj-worker--young 10.0
  "A worker that dies within this many seconds of starting died young.")

;;; Finding things

(defun forj-worker--checkout-python ()
  "The Python of the .venv of the forj checkout this package is, or nil.
A checkout's .venv (made by `make install') holds the worker's sources
as they are, which a developer wants to run."
  (let ((source (forj-install-package-directory)))
    (and source
         (let ((venv (expand-file-name ".venv/bin/python" source)))
           (and (file-executable-p venv) venv)))))

(defun forj-worker-python-executable (&optional root)
  "Return the Python interpreter for the worker of ROOT, per `forj-worker-python'.
Automatic: the checkout's .venv, else the worker `forj-install-worker'
built on ROOT's host.  Signal a `user-error' saying what to do if
there is none."
  (let ((choice (or (default-value 'forj-worker-python)
                    (forj-worker--checkout-python)
                    (forj-install-python root))))
    (unless choice
      (user-error "forj: No worker yet: M-x forj-install-worker builds it in %s (it needs Python 3.10 or newer), or set `forj-worker-python'"
                  (forj-install-data-directory root)))
    (or (if (file-name-absolute-p choice)
            (and (file-executable-p choice) choice)
          (executable-find choice))
        (user-error "No Python interpreter at %s; set `forj-worker-python'" choice))))

(defun forj-worker-python-available-p (&optional root)
  "Whether a Python for the worker of ROOT is there, without signalling.
For a remote ROOT, whether its host has a worker (forj-remote.el)."
  (if (and root (file-remote-p root) (require 'forj-remote))
      (forj-remote-worker-available-p root)
    (condition-case nil
        (and (forj-worker-python-executable root) t)
      (user-error nil))))

(defun forj-worker-project-root (&optional directory)
  "The project root for DIRECTORY (default `default-directory'), or signal."
  (let* ((dir (or directory default-directory))
         (project (project-current nil dir)))
    (unless project
      (user-error "forj: %s is not inside a project (no version control root found)"
                  (abbreviate-file-name dir)))
    (file-name-as-directory (expand-file-name (project-root project)))))

;;; Starting

(defun forj-worker-offer-install (root then)
  "Call THEN in the current buffer once ROOT's worker can start.
With no Python for ROOT's worker, first offer to build it with
`forj-install-worker', and call THEN when the build ends.  Declined,
in batch, or with a Python already there, THEN is called at once (a
worker that cannot start says what is missing)."
  (let ((buffer (current-buffer)))
    (if (or noninteractive
            (forj-worker-python-available-p root)
            (forj-install-running-p root)
            (not (y-or-n-p (format "Build forj's Python worker now, once, in %s (a minute, with network to the package index)? "
                                   (forj-install-data-directory root)))))
        (funcall then)
      (display-buffer (get-buffer-create forj-install-buffer))
      (forj-install-worker root (lambda (_python _failure)
                                  (when (buffer-live-p buffer)
                                    (with-current-buffer buffer (funcall then))))))))

(defun forj-worker-ensure (root success &optional error)
  "Make sure a ready worker serves ROOT; then call SUCCESS with it.
ERROR is called with an error plist if the worker cannot be started."
  (let* ((root (file-name-as-directory (expand-file-name root)))
         (worker (gethash root forj-worker--by-root))
         (error (or error (lambda (err) (message "forj: %s" (plist-get err :message))))))
    (cond
     ((and worker (forj-worker-hello worker)
           (forj-epc-live-p (forj-worker-connection worker)))
      (run-at-time 0 nil success worker))
     ((and worker (process-live-p (forj-worker-process worker)))
      (push (cons success error) (forj-worker-waiting worker)))
     ((process-live-p (gethash root forj-worker--stopping))
      ;; Two workers never share a project: the next starts when the last has
      ;; closed its journal, so it finds every delivery recorded.
      (run-at-time 0.05 nil #'forj-worker-ensure root success error))
     (t
      (remhash root forj-worker--stopping)
      (let ((wait (forj-worker--backoff root)))
        (if (> wait 0)
            (run-at-time wait nil #'forj-worker-ensure root success error)
          (forj-worker--start root success error)))))))

(defun forj-worker--backoff (root)
  "Seconds to wait before starting a worker for ROOT again."
  (let ((failures (gethash root forj-worker--failures)))
    (if (null failures)
        0
      (let* ((count (car failures))
             (due (+ (cdr failures) (min 30 (expt 2 (1- count))))))
        (max 0 (- due (float-time)))))))

(cl-defun forj-worker--start (root success error)
  "Start a worker for ROOT; queue SUCCESS and ERROR for when it is ready.
A remote ROOT (a TRAMP directory) gets its worker on its own host,
spoken to over the connection's pipe: see forj-remote.el."
  (let* ((remote (and (file-remote-p root) (require 'forj-remote)))
         (token (forj-worker--token))
         (log (get-buffer-create (forj-worker--log-name root)))
         (process-environment (forj-worker-environment))
         (default-directory root)
         (worker (forj-worker--make :root root :token token :started (float-time)
                                    :waiting (list (cons success error))))
         (process
          (condition-case err
              (if remote
                  (forj-remote-make-process root log)
                (make-process
               :name (format "forj-worker %s" (abbreviate-file-name root))
               :command (append (list (forj-worker-python-executable root) "-m" "forj_py"
                                      "--root" (directory-file-name root) "--token-stdin")
                                (forj-worker-settings-arguments)
                                (default-value 'forj-worker-arguments))
               :connection-type 'pipe
               :noquery t
               :coding 'utf-8-unix
               :stderr log
               :filter #'forj-worker--port-filter
               :sentinel #'forj-worker--sentinel))
            (error
             (run-at-time 0 nil error
                          (list :type "start-failed"
                                :message (format "cannot start the worker: %s"
                                                 (error-message-string err))
                                :recovery (if remote
                                              '("Check `forj-remote-python' and M-x forj-worker-log")
                                            '("M-x forj-install-worker, or check `forj-worker-python'"))))
             nil))))
    (unless process
      (cl-return-from forj-worker--start nil))
    ;; The token goes through the pipe, not the environment, which any
    ;; process of the user can read in /proc/<pid>/environ.
    ;; A worker that died at once is the sentinel's to report.
    (ignore-errors (process-send-string process (concat token "\n")))
    (with-current-buffer log
      (let ((inhibit-read-only t))
        (goto-char (point-max))
        (setf (forj-worker-log-start worker) (copy-marker (point)))
        (insert (format "\n;; %s: starting the worker for %s\n"
                        (format-time-string "%F %T") root))
        ;; The stderr pipe writes at its own mark: after this line, not before.
        (let ((stderr (get-buffer-process log)))
          (when stderr (set-marker (process-mark stderr) (point))))))
    (process-put process 'forj-worker worker)
    (setf (forj-worker-process worker) process)
    (puthash root worker forj-worker--by-root)
    (when remote
      ;; No port to wait for: the frames go over the process's own pipe.
      (forj-worker-attach worker))
    (run-at-time forj-worker-start-timeout nil #'forj-worker--start-timed-out worker)
    worker))

(defun forj-worker--token ()
  "A fresh random token: 32 hex digits from the system's entropy source."
  (let ((bytes (with-temp-buffer
                 (set-buffer-multibyte nil)
                 (when (and (file-readable-p "/dev/urandom") (executable-find "head"))
                   (ignore-errors (call-process "head" "/dev/urandom" t nil "-c" "32")))
                 (buffer-string))))
    (when (< (length bytes) 32)
      ;; No /dev/urandom: `random' seeded from the system is the next best.
      (random t)
      (setq bytes (format "%s%s%s%s" (random) (random) (float-time) (emacs-pid))))
    (substring (secure-hash 'sha256 bytes) 0 32)))

(defun forj-worker--port-filter (process output)
  "Collect PROCESS OUTPUT until the port line, then connect."
  (let* ((worker (process-get process 'forj-worker))
         (seen (concat (or (process-get process 'forj-stdout) "") output)))
    (process-put process 'forj-stdout seen)
    (when (and worker (null (forj-worker-connection worker)) (string-match "\\`\\([0-9]+\\)\n" seen))
      (forj-worker--connect worker (string-to-number (match-string 1 seen))))))

(defun forj-worker--connect (worker port)
  "Connect to WORKER on PORT and say hello."
  (condition-case err
      (forj-worker--greet worker (forj-epc-connect port
                                                   :name (abbreviate-file-name (forj-worker-root worker))
                                                   :on-request (lambda (method body answer)
                                                                 (forj-worker--request worker method body answer))
                                                   :on-close (lambda (_conn reason)
                                                               (forj-worker--lost worker reason))))
    (error (forj-worker--fail worker (list :type "connect-failed"
                                           :message (error-message-string err))))))

(defun forj-worker-attach (worker)
  "Speak EPC to WORKER over its own process's pipe (a --stdio worker); say hello."
  (forj-worker--greet
   worker
   (forj-epc-attach (forj-worker-process worker)
                    :name (abbreviate-file-name (forj-worker-root worker))
                    ;; The remote login shell may print first: not a frame.
                    :preamble forj-epc-stdio-preamble
                    :on-request (lambda (method body answer)
                                  (forj-worker--request worker method body answer))
                    :on-close (lambda (_conn reason)
                                (forj-worker--lost worker reason)))))

(defun forj-worker--greet (worker conn)
  "Make CONN WORKER's connection and say hello on it."
  (setf (forj-worker-connection worker) conn)
  (forj-epc-call conn "hello"
                       (list :token (forj-worker-token worker)
                             :client (list :name "forj.el" :version forj-version))
                 :timeout forj-worker-start-timeout
                 :success (lambda (hello) (forj-worker--ready worker hello))
                 :error (lambda (e) (forj-worker--fail worker e))))

(defun forj-worker-outdated-p (worker)
  "Whether WORKER's hello reports a version other than this Elisp's."
  (let ((version (plist-get (forj-worker-hello worker) :version)))
    (and version (not (equal version forj-version)))))

(defun forj-worker--version-warning (hello)
  "A warning for HELLO from a worker of another version than this Elisp, or nil.
After a package upgrade the built worker is the old one until
`forj-install-worker' rebuilds it."
  (let ((version (plist-get hello :version)))
    (when (and version (not (equal version forj-version)))
      (format "the worker is forj %s but this Emacs runs forj.el %s (was the package upgraded?): M-x forj-install-worker rebuilds the worker"
              version forj-version))))

(defun forj-worker--ready (worker hello)
  "WORKER answered HELLO: run everything waiting for it."
  (when (file-remote-p (forj-worker-root worker))
    ;; Its root as Emacs names it: every path under it is then a remote file.
    (setq hello (forj-remote-hello (forj-worker-root worker) hello)))
  (let ((outdated (forj-worker--version-warning hello)))
    (when outdated
      (setq hello (plist-put hello :warnings
                             (vconcat (list outdated) (plist-get hello :warnings))))))
  (setf (forj-worker-hello worker) hello)
  (remhash (forj-worker-root worker) forj-worker--failures)
  (mapc (lambda (warning) (display-warning 'forj warning :warning))
        (plist-get hello :warnings))
  (when (plist-get hello :mcp_starting)
    (forj-worker--tools-once-servers-start worker))
  (let ((waiting (reverse (forj-worker-waiting worker))))
    (setf (forj-worker-waiting worker) nil)
    (dolist (cb waiting) (funcall (car cb) worker))))

(defun forj-worker--tools-once-servers-start (worker)
  "Take WORKER's tools again once the outside MCP servers still starting are up.
Hello does not wait for a slow server; its tools come later."
  (let ((conn (forj-worker-connection worker)))
    (forj-epc-call
     conn "mcp_servers" nil
     :timeout 660
     :error #'ignore
     :success (lambda (_)
                (forj-epc-call
                 conn "tool_definitions" nil
                 :error #'ignore
                 :success (lambda (reply)
                            (setf (forj-worker-hello worker)
                                  (plist-put (copy-sequence (forj-worker-hello worker))
                                             :tools (plist-get reply :tools)))))))))

(defun forj-worker--fail (worker err)
  "WORKER could not become ready because of ERR: tell everyone waiting."
  (let ((waiting (reverse (forj-worker-waiting worker))))
    (setf (forj-worker-waiting worker) nil)
    (when (process-live-p (forj-worker-process worker))
      (delete-process (forj-worker-process worker)))
    (dolist (cb waiting) (funcall (cdr cb) err))))

(defun forj-worker--start-timed-out (worker)
  "Give up on WORKER if it is still not ready."
  (when (and (null (forj-worker-hello worker)) (forj-worker-waiting worker))
    (forj-worker--fail worker
                       (list :type "start-timeout"
                             :message (format "the worker did not start within %s s; see M-x forj-worker-log"
                                              forj-worker-start-timeout)))))

;;; Questions from the worker

(autoload 'forj-mcp-review "forj-mcp")
(autoload 'forj-diagnostics-answer "forj-diagnostics")

(defvar forj-worker-request-functions '(("review" . forj-mcp-review)
                                        ("diagnostics" . forj-diagnostics-answer))
  "Alist: a method the worker may call in Emacs -> the function answering it.
Each function is called with the worker, the call's argument (a plist)
and a function of one plist that sends the answer; it returns non-nil
when it took the call.")

(defun forj-worker--request (worker method body answer)
  "Let the function for METHOD answer WORKER's question BODY through ANSWER."
  (let ((handler (cdr (assoc method forj-worker-request-functions))))
    (and handler (funcall handler worker body answer))))

;;; Death

(defun forj-worker--sentinel (process event)
  "The worker PROCESS changed state with EVENT."
  (unless (process-live-p process)
    (let ((worker (process-get process 'forj-worker)))
      (when worker
        (forj-worker--lost worker (string-trim event))))))

(defun forj-worker--lost (worker reason)
  "WORKER is gone for REASON: forget it, fail what waits, and say so once."
  (let ((root (forj-worker-root worker)))
    (when (eq (gethash root forj-worker--by-root) worker)
      (remhash root forj-worker--by-root)
      (when (< (- (float-time) (forj-worker-started worker)) forj-worker--young)
        (let ((failures (gethash root forj-worker--failures)))
          (puthash root (cons (1+ (or (car failures) 0)) (float-time)) forj-worker--failures)))
      (let ((conn (forj-worker-connection worker)))
        (when conn (forj-epc-close conn reason)))
      (when (process-live-p (forj-worker-process worker))
        (delete-process (forj-worker-process worker)))
      (if (forj-worker-hello worker)
          (forj-worker--died worker reason)
        ;; A worker that refused to start said why on stderr, which may
        ;; arrive just after its exit: read it a moment later.
        (run-at-time 0.2 nil #'forj-worker--died worker reason)))))

(defvar forj-worker--chat-grants (make-hash-table :test #'eq :weakness 'key)
  "Workers holding grants given for one chat (this chat, N minutes).
Such a grant lives in the worker's memory only: when it dies, it is lost.")

(defun forj-worker-note-chat-grants (worker)
  "Note a grant given for one chat only, held in the memory of WORKER."
  (puthash worker t forj-worker--chat-grants))

(defun forj-worker--died (worker reason)
  "Tell everyone waiting for WORKER, and the user, that it is gone for REASON.
When it held grants given for a chat, the user is told they are lost."
  (let ((why (and (null (forj-worker-hello worker)) (forj-worker--start-error worker)))
        (grants (and (gethash worker forj-worker--chat-grants)
                     "; the grants given for a chat (this chat, N minutes) are lost with it, so the calls they covered are reviewed again")))
    (forj-worker--fail worker
                       (list :type "worker-died"
                             :message (if why
                                          (concat "forj worker: " why)
                                        (format "the worker died (%s); see M-x forj-worker-log"
                                                reason))))
    (if why
        (message "forj: the worker for %s could not start: %s"
                 (abbreviate-file-name (forj-worker-root worker)) why)
      (message "forj: the worker for %s stopped (%s); the next call starts a new one%s"
               (abbreviate-file-name (forj-worker-root worker)) reason (or grants "")))))

(defun forj-worker--start-error (worker)
  "What WORKER said on stderr when it refused to start, or nil."
  (let ((start (forj-worker-log-start worker)))
    (when (and (markerp start) (buffer-live-p (marker-buffer start)))
      (with-current-buffer (marker-buffer start)
        (save-excursion
          (goto-char start)
          (when (re-search-forward "^forj worker: " nil t)
            (let ((text (string-trim
                         (buffer-substring-no-properties
                          (point)
                          ;; Emacs notes the end of the stderr pipe after it.
                          (or (save-excursion
                                (and (re-search-forward "^Process .* stderr " nil t)
                                     (line-beginning-position)))
                              (point-max))))))
              (replace-regexp-in-string "[ \t]*\n[ \t]*" " " text))))))))

;;; The command sandbox

(defun forj-worker-sandbox (worker)
  "The command sandbox WORKER reports in its hello, a plist, or nil.
:commands is \"bwrap\" (commands run sandboxed) or \"none\" (they run
unsandboxed, :reason says why), :network \"off\" unless a call asks
for it, and :silenced is t when the user's own configuration turned
the sandbox off on purpose.  nil: the worker is not ready, or does
not report a sandbox."
  (and worker
       (let ((sandbox (plist-get (forj-worker-hello worker) :sandbox)))
         (and (listp sandbox) (keywordp (car-safe sandbox)) sandbox))))

(defun forj-worker-sandbox-description (worker)
  "One line telling how WORKER will run commands, for the chat and `forj-status'."
  (let ((sandbox (forj-worker-sandbox worker)))
    (cond
     ((null worker) "commands: worker not started")
     ((null (forj-worker-hello worker)) "commands: worker starting…")
     ((null sandbox) "commands: sandbox unknown (the worker does not report one)")
     ((equal (plist-get sandbox :commands) "bwrap")
      (format "commands: sandboxed (network %s)" (or (plist-get sandbox :network) "off")))
     (t
      (concat "commands: NOT sandboxed: "
              (let ((reason (plist-get sandbox :reason)))
                (if (and (stringp reason) (not (string-empty-p reason))) reason "no reason given"))
              (if (eq (plist-get sandbox :silenced) t) " (your configuration)" ""))))))

(defun forj-worker-get (root)
  "The worker serving ROOT, ready or starting, or nil."
  (gethash (file-name-as-directory (expand-file-name root)) forj-worker--by-root))

;;; Commands

;;;###autoload
(defun forj-status (&optional root)
  "Say how the worker of the current project (or of ROOT) stands.
Whether it runs, and whether its commands run sandboxed."
  (interactive)
  (let* ((root (or root (forj-worker-project-root)))
         (worker (forj-worker-get root))
         (process (and worker (forj-worker-process worker))))
    (message "forj: %s: %s"
             (abbreviate-file-name (directory-file-name root))
             (cond ((null worker) "no worker running (a chat or the first tool call starts one)")
                   ((forj-worker-hello worker)
                    (format "worker ready (pid %s); %s" (process-id process)
                            (forj-worker-sandbox-description worker)))
                   (t "worker starting")))))

(defun forj-worker--log-name (root)
  "The name of the log buffer for ROOT's worker."
  (format "*forj-worker-log: %s*" (abbreviate-file-name (directory-file-name root))))

(defun forj-worker-stop (root)
  "Stop the worker serving ROOT, if there is one."
  (let ((worker (gethash (file-name-as-directory (expand-file-name root)) forj-worker--by-root)))
    (when worker
      (remhash (forj-worker-root worker) forj-worker--by-root)
      (let ((conn (forj-worker-connection worker))
            (process (forj-worker-process worker)))
        (when (forj-epc-live-p conn)
          (forj-epc-close conn "stopped"))
        (when (process-live-p process)
          ;; The end of its stdin asks the worker to stop: it cancels what runs
          ;; and closes its journal.  Killed at once, it could lose the note
          ;; that a reply reached Emacs, and the next worker would offer that
          ;; batch for recovery again.
          (puthash (forj-worker-root worker) process forj-worker--stopping)
          (condition-case nil
              (process-send-eof process)
            (error (delete-process process)))
          (run-at-time forj-worker--stop-grace nil
                       (lambda ()
                         (when (process-live-p process)
                           (delete-process process)))))))))

(defun forj-worker--after-install (directory _python)
  "Stop the workers on DIRECTORY's host that are older than this Elisp.
They ran the worker `forj-install-worker' has just replaced; the next
call starts the new one."
  (let ((prefix (or (file-remote-p directory) "")))
    (dolist (worker (hash-table-values forj-worker--by-root))
      (when (and (equal (or (file-remote-p (forj-worker-root worker)) "") prefix)
                 (forj-worker-outdated-p worker))
        (forj-worker-stop (forj-worker-root worker))))))

(add-hook 'forj-install-finished-functions #'forj-worker--after-install)

;;;###autoload
(defun forj-worker-restart (&optional root)
  "Restart the worker of the current project (or of ROOT)."
  (interactive)
  (let ((root (or root (forj-worker-project-root))))
    (forj-worker-stop root)
    (remhash (file-name-as-directory (expand-file-name root)) forj-worker--failures)
    (forj-worker-ensure root (lambda (_worker) (message "forj: worker for %s is ready"
                                                        (abbreviate-file-name root))))))

;;;###autoload
(defun forj-worker-log (&optional root)
  "Show what the worker of the current project (or of ROOT) printed."
  (interactive)
  (let* ((root (or root (forj-worker-project-root)))
         (buffer (get-buffer (forj-worker--log-name root))))
    (if buffer
        (display-buffer buffer)
      (message "forj: no worker has run for %s" (abbreviate-file-name root)))))

(provide 'forj-worker)
;;; forj-worker.el ends here
