;;; forj-remote-test.el --- A chat on a remote project, through a real sshd  -*- lexical-binding: t; -*-

;;; Commentary:

;; The suite starts Debian's OpenSSH server on 127.0.0.1 on a free
;; port, with a host key and a user key made for it in a temporary
;; directory, and reaches it with TRAMP's /ssh: method (an ssh config
;; file of the test's own, given to ssh with -F).  The "remote" host is
;; this machine, so the worker there runs with this checkout's Python
;; (`forj-remote-python'), and the test can look at its processes.  A
;; chat then reads, edits with review, runs a sandboxed command, and
;; survives a dropped connection (the sshd process serving the worker
;; killed), with the remote journal offering what was left unfinished.
;; Skipped, saying why, only when there is no sshd to start.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'tramp)
(require 'tramp-sh)
(require 'forj-remote)
(require 'forj-recover)
(require 'forj-undo)
(require 'forj-epc-test)
(require 'forj-chat-test)

(defvar forj-remote-test--sshd nil
  "The test's sshd once started: (:port :dir :process :config).")

(defun forj-remote-test--sshd-program ()
  "The sshd to run, or nil."
  (or (executable-find "sshd")
      (and (file-executable-p "/usr/sbin/sshd") "/usr/sbin/sshd")))

(defun forj-remote-test--skip-reason ()
  "Why the suite cannot start an sshd here, or nil."
  (cond ((not (forj-remote-test--sshd-program))
         "no sshd (install openssh-server; .ci/run does)")
        ((not (executable-find "ssh")) "no ssh client (install openssh-client)")
        ((not (executable-find "ssh-keygen")) "no ssh-keygen (install openssh-client)")
        ((and (not (zerop (user-uid))) (not (file-directory-p "/run/sshd")))
         "sshd needs /run/sshd, which only root can make")))

(defun forj-remote-test--free-port ()
  "A TCP port on 127.0.0.1 nobody listens on now."
  (let ((probe (make-network-process :name "forj-port-probe" :server t
                                     :host "127.0.0.1" :service t :noquery t)))
    (prog1 (process-contact probe :service)
      (delete-process probe))))

(defun forj-remote-test--write (file text)
  "Write TEXT to FILE."
  (with-temp-file file (insert text)))

(defun forj-remote-test--sshd ()
  "Start the test's sshd once per Emacs; return its plist."
  (or (and forj-remote-test--sshd
           (process-live-p (plist-get forj-remote-test--sshd :process))
           forj-remote-test--sshd)
      (let* ((dir (file-name-as-directory (make-temp-file "forj-sshd-" t)))
             (port (forj-remote-test--free-port))
             (remote-home (expand-file-name "remote-home/" dir))
             (config (expand-file-name "sshd_config" dir))
             (client (expand-file-name "ssh_config" dir)))
        (dolist (key '("host_key" "user_key"))
          (should (zerop (call-process "ssh-keygen" nil nil nil "-q" "-t" "ed25519" "-N" ""
                                       "-f" (expand-file-name key dir)))))
        (copy-file (expand-file-name "user_key.pub" dir) (expand-file-name "authorized_keys" dir))
        (make-directory remote-home t)
        (when (zerop (user-uid)) (make-directory "/run/sshd" t))
        (forj-remote-test--write
         config
         (concat (format "Port %d\nListenAddress 127.0.0.1\n" port)
                 (format "HostKey %shost_key\n" dir)
                 (format "AuthorizedKeysFile %sauthorized_keys\n" dir)
                 (format "PidFile %ssshd.pid\n" dir)
                 "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
                 "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
                 ;; Whatever a client forwards is taken: a secret that got as
                 ;; far as the local ssh would reach the remote shell.
                 "AcceptEnv *\n"
                 ;; The remote user's data, state and config directories are
                 ;; the test's: the worker's journal lands there.
                 (format "SetEnv XDG_STATE_HOME=%sstate XDG_DATA_HOME=%sdata XDG_CONFIG_HOME=%sconfig\n"
                         remote-home remote-home remote-home)
                 "LogLevel ERROR\n"))
        (forj-remote-test--write
         client
         (concat "Host 127.0.0.1\n"
                 (format "  IdentityFile %suser_key\n" dir)
                 "  IdentitiesOnly yes\n"
                 (format "  UserKnownHostsFile %sknown_hosts\n" dir)
                 "  StrictHostKeyChecking no\n  BatchMode yes\n  LogLevel ERROR\n"
                 "  ControlMaster no\n  ControlPath none\n"
                 ;; As a user's config may: forward variables named like keys.
                 "  SendEnv ANTHROPIC_* OPENAI_* FORJ_TEST_*\n"))
        (let ((process (make-process :name "forj-test-sshd"
                                     :command (list (forj-remote-test--sshd-program) "-D" "-e" "-f" config)
                                     :buffer (get-buffer-create " *forj-test-sshd*")
                                     :noquery t)))
          (should (forj-test--wait-for
                   (lambda ()
                     (ignore-errors
                       (delete-process (make-network-process :name "forj-sshd-probe" :host "127.0.0.1"
                                                             :service port :noquery t))
                       t))
                   20))
          (setq forj-remote-test--sshd
                (list :port port :dir dir :process process :config client
                      :remote-home remote-home))))))

(defun forj-remote-test--stop-sshd ()
  "Stop the test's sshd and remove its directory."
  (when forj-remote-test--sshd
    (let ((process (plist-get forj-remote-test--sshd :process)))
      (when (process-live-p process) (delete-process process)))
    (ignore-errors (delete-directory (plist-get forj-remote-test--sshd :dir) t))
    (setq forj-remote-test--sshd nil)))

(add-hook 'kill-emacs-hook #'forj-remote-test--stop-sshd)

(defmacro forj-remote-test-with-chat (tree replies &rest body)
  "Run BODY in a chat on a remote project made of TREE, the model replaying REPLIES.
`root' is the project's local path, `remote' its TRAMP name, `sshd'
the server's plist.  The environment holds provider keys, at top level
and bound, for the test to prove they stay here."
  (declare (indent 2) (debug t))
  `(let ((reason (forj-remote-test--skip-reason)))
     (when reason (ert-skip reason))
     (let* ((sshd (forj-remote-test--sshd))
            (tramp-persistency-file-name nil)
            (tramp-verbose 1)
            (tramp-use-ssh-controlmaster-options t)
            (tramp-ssh-controlmaster-options (format "-F %s" (plist-get sshd :config)))
            (forj-remote-python forj-test--python)
            (forj-tools-unsaved-buffers 'deny)
            (secrets '("ANTHROPIC_API_KEY=sk-ant-remote-test-0123456789abcdef"
                       "FORJ_TEST_DEPLOY_TOKEN=remote-test-token-value"))
            (toplevel (default-toplevel-value 'process-environment)))
       (unwind-protect
           (progn
             (set-default-toplevel-value 'process-environment (append secrets toplevel))
             (let ((process-environment (append secrets process-environment)))
               (forj-test-with-project ,tree
                 (make-directory (expand-file-name ".git" root))
                 (let* ((remote (format "/ssh:%s@127.0.0.1#%d:%s" (user-login-name)
                                        (plist-get sshd :port) root))
                        (script (forj-chat-test--script ,replies))
                        (forj-providers (cons (list "test-script" :family 'scripted :script script)
                                              forj-providers))
                        (forj-provider "test-script")
                        (forj-provider-scripted-delay 0.001)
                        (chat (forj remote)))
                   (unwind-protect
                       (with-current-buffer chat ,@body)
                     (when (buffer-live-p chat)
                       (with-current-buffer chat (set-buffer-modified-p nil))
                       (kill-buffer chat))
                     (when (get-buffer "*forj-review*") (kill-buffer "*forj-review*"))
                     (forj-worker-stop remote)
                     (delete-file script)
                     (tramp-cleanup-all-connections))))))
         (set-default-toplevel-value 'process-environment toplevel)))))

(defun forj-remote-test--approve-until-idle (&optional timeout)
  "Approve every review that opens until the chat's turn is over."
  (let ((buffer (current-buffer)))
    (forj-test--wait-for
     (lambda ()
       (let ((review (get-buffer "*forj-review*")))
         (when (and review (with-current-buffer review (derived-mode-p 'forj-review-mode)))
           (with-current-buffer review
             (forj-review-approve-all)
             (forj-review-commit))))
       (eq (forj-session-state (buffer-local-value 'forj-session buffer)) 'idle))
     (or timeout 60))))

(defun forj-remote-test--cmdline (pid)
  "The command line of PID as a list of strings, or nil."
  (let ((file (format "/proc/%d/cmdline" pid)))
    (and (file-readable-p file)
         (split-string (with-temp-buffer
                         (set-buffer-multibyte nil)
                         (insert-file-contents-literally file)
                         (buffer-string))
                       "\0" t))))

(defun forj-remote-test--environ (pid)
  "The environment PID was started with, a list of NAME=VALUE strings."
  (with-temp-buffer
    (set-buffer-multibyte nil)
    (insert-file-contents-literally (format "/proc/%d/environ" pid))
    (split-string (buffer-string) "\0" t)))

(defun forj-remote-test--worker-pid (root)
  "The pid of the stdio worker serving ROOT (a local path), or nil."
  (cl-find-if (lambda (pid)
                (let ((cmd (forj-remote-test--cmdline pid)))
                  (and (member "--stdio" cmd)
                       (member (directory-file-name root) cmd))))
              (list-system-processes)))

(defun forj-remote-test--ancestors (pid)
  "PID's parent, its parent, and so on, up to (not including) pid 1."
  (let (chain)
    (while (and pid (> pid 1))
      (setq pid (alist-get 'ppid (process-attributes pid)))
      (when (and pid (> pid 1)) (push pid chain)))
    (nreverse chain)))

(defun forj-remote-test--sshd-session-p (pid)
  "Whether PID is an sshd process (the one serving a connection)."
  (string-prefix-p "sshd" (or (car (forj-remote-test--cmdline pid)) "")))

(defconst forj-remote-test--replies
  (list (list :text (concat "Reading.\n\n"
                            (forj-chat-test--block
                             "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"notes.txt\"}}")))
        (list :text (concat "Editing.\n\n"
                            (forj-chat-test--block
                             "{\"id\": \"e1\", \"name\": \"edit\", \"args\": {\"path\": \"notes.txt\", \"old_string\": \"milk\", \"new_string\": \"bread\"}}")))
        (list :text (concat "Running.\n\n"
                            (forj-chat-test--block
                             "{\"id\": \"s1\", \"name\": \"run_shell\", \"args\": {\"cmd\": \"echo from-the-sandbox > out.txt; cat notes.txt\"}}")))
        (list :text "Done: the note says bread."))
  "A read, an edit, a command, and an answer.")

(ert-deftest forj-test-remote-chat-reads-edits-with-review-and-runs-a-sandboxed-command-over-ssh ()
  "A chat on /ssh: runs every tool on the remote host; review, reverts and undo happen here."
  (forj-remote-test-with-chat '(("notes.txt" . "remember the milk\n"))
      forj-remote-test--replies
    (let ((visiting (find-file-noselect (concat remote "notes.txt"))))
      (unwind-protect
          (progn
            (forj-chat-test--say "Change milk to bread, then run the command.")
            (should (forj-remote-test--approve-until-idle 120))
            (let ((worker (forj-worker-get remote))
                  (text (buffer-string)))
              ;; The worker's root is the remote directory, as Emacs names it.
              (should (equal (plist-get (forj-worker-hello worker) :root)
                             (directory-file-name remote)))
              (should (equal (plist-get (forj-worker-hello worker) :remote-root)
                             (directory-file-name root)))
              ;; The read came back, the edit was made on the remote file,
              ;; the command ran there in the sandbox.
              (should (string-match-p "remember the milk" text))
              (should (equal (with-temp-buffer
                               (insert-file-contents (expand-file-name "notes.txt" root))
                               (buffer-string))
                             "remember the bread\n"))
              (should (equal (plist-get (forj-worker-sandbox worker) :commands) "bwrap"))
              (should (file-exists-p (expand-file-name "out.txt" root)))
              (should (string-match-p "Done: the note says bread." (forj-session-transcript)))
              ;; The buffer visiting the remote file was reverted.
              (should (equal (with-current-buffer visiting (buffer-string)) "remember the bread\n"))
              ;; It really ran through ssh: the worker's ancestors include sshd.
              (let ((pid (forj-remote-test--worker-pid root)))
                (should pid)
                (should (cl-some #'forj-remote-test--sshd-session-p (forj-remote-test--ancestors pid)))
                ;; No provider key reached the remote host, nor the local ssh
                ;; that could have forwarded it (the test's ssh config asks to).
                (dolist (p (list (alist-get 'ppid (process-attributes pid))
                                 (process-id (forj-worker-process worker))))
                  (let ((env (forj-remote-test--environ p)))
                    (should env)
                    (should-not (cl-find-if (lambda (e) (string-prefix-p "ANTHROPIC_API_KEY=" e)) env))
                    (should-not (cl-find-if (lambda (e) (string-prefix-p "FORJ_TEST_DEPLOY_TOKEN=" e))
                                            env))))))
            ;; Undo, from the chat: the diff is reviewed here, the remote
            ;; worker puts the file back, the TRAMP buffer is reverted.
            (forj-undo)
            (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 60))
            (with-current-buffer "*forj-review*"
              (should (string-match-p "bread" (buffer-string)))
              (forj-review-approve-all)
              (forj-review-commit))
            (should (forj-test--wait-for
                     (lambda () (equal (with-current-buffer visiting (buffer-string))
                                       "remember the milk\n"))
                     60))
            (should (equal (with-temp-buffer
                             (insert-file-contents (expand-file-name "notes.txt" root))
                             (buffer-string))
                           "remember the milk\n"))
            ;; Stopped, the remote worker gets the end of its stdin, closes its
            ;; journal and exits; ssh ends with it, never killed.
            (let ((process (forj-worker-process (forj-worker-get remote)))
                  (pid (forj-remote-test--worker-pid root)))
              (forj-worker-stop remote)
              (should (forj-test--wait-for (lambda () (not (process-live-p process))) 4))
              (should (eq (process-status process) 'exit))
              (should (eq (process-exit-status process) 0))
              (should (null (process-attributes pid)))))
        (with-current-buffer visiting (set-buffer-modified-p nil))
        (kill-buffer visiting)))))

(ert-deftest forj-test-remote-unsaved-remote-buffer-is-guarded ()
  "The modified-buffer guard sees a TRAMP buffer of the remote file: no call overwrites it."
  (forj-remote-test-with-chat '(("notes.txt" . "remember the milk\n"))
      (list (list :text (concat "Writing.\n\n"
                                (forj-chat-test--block
                                 "{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"notes.txt\", \"content\": \"overwritten\\n\"}}")))
            (list :text "It was refused."))
    (let ((visiting (find-file-noselect (concat remote "notes.txt"))))
      (unwind-protect
          (progn
            (with-current-buffer visiting
              (goto-char (point-max))
              (insert "my unsaved line\n"))
            (forj-chat-test--say "Overwrite notes.txt.")
            (should (forj-remote-test--approve-until-idle 120))
            (should (string-match-p "unsaved changes to notes.txt" (buffer-string)))
            (should (equal (with-temp-buffer
                             (insert-file-contents (expand-file-name "notes.txt" root))
                             (buffer-string))
                           "remember the milk\n"))
            (should (string-match-p "my unsaved line" (with-current-buffer visiting (buffer-string)))))
        (with-current-buffer visiting (set-buffer-modified-p nil))
        (kill-buffer visiting)))))

;; What the host lacks, said plainly.  Each Python is a wrapper made for
;; the test on the "remote" host (this machine): the real interpreter
;; without the worker's packages, or the worker's with no bwrap on PATH.

(defun forj-remote-test--wrapper (dir name body)
  "Write an executable shell script NAME in DIR running BODY; its path."
  (let ((file (expand-file-name name dir)))
    (forj-remote-test--write file (concat "#!/bin/sh\n" body "\n"))
    (set-file-modes file #o755)
    file))

(ert-deftest forj-test-remote-host-check-says-what-is-missing ()
  "The host check names a missing Python, a missing worker, and a missing bubblewrap."
  (let ((reason (forj-remote-test--skip-reason)))
    (when reason (ert-skip reason)))
  (let* ((sshd (forj-remote-test--sshd))
         (tramp-persistency-file-name nil)
         (tramp-verbose 1)
         (tramp-use-ssh-controlmaster-options t)
         (tramp-ssh-controlmaster-options (format "-F %s" (plist-get sshd :config)))
         (dir (file-name-as-directory (make-temp-file "forj-remote-check-" t)))
         (remote (format "/ssh:%s@127.0.0.1#%d:%s" (user-login-name) (plist-get sshd :port) dir))
         (bare (forj-remote-test--wrapper
                dir "bare-python" (format "exec %s -I \"$@\"" (file-truename forj-test--python))))
         (no-bwrap (forj-remote-test--wrapper
                    dir "no-bwrap-python" (format "PATH=/nonexistent exec %s \"$@\"" forj-test--python))))
    (unwind-protect
        (progn
          (let ((check (forj-remote-check remote "/nonexistent/python3")))
            (should (null (plist-get check :python)))
            (should (string-match-p "no Python at /nonexistent/python3 on /ssh:.*install python3 (3.10 or later)"
                                    (car (plist-get check :problems)))))
          (let ((check (forj-remote-check remote bare)))
            (should (plist-get check :python))
            (should (null (plist-get check :forj)))
            (should (string-match-p "cannot import the worker (forj_py)"
                                    (string-join (plist-get check :problems) "\n"))))
          (let ((check (forj-remote-check remote no-bwrap)))
            (should (plist-get check :forj))
            (should (equal (plist-get check :problems)
                           (list (format "no bubblewrap (bwrap) on %s: every command will be reviewed before it runs; install bubblewrap there to sandbox them"
                                         (file-remote-p remote))))))
          (let ((check (forj-remote-check remote forj-test--python)))
            (should (plist-get check :bwrap))
            (should (null (plist-get check :problems))))
          ;; Starting a worker with a Python that lacks it stops with the reason.
          (clrhash forj-remote--checked)
          (let ((forj-remote-python bare)
                (log (generate-new-buffer " *forj-remote-check-log*")))
            (unwind-protect
                (should (string-match-p "cannot import the worker"
                                        (cadr (should-error (forj-remote-make-process remote log)
                                                            :type 'user-error))))
              (kill-buffer log))))
      (clrhash forj-remote--checked)
      (delete-directory dir t)
      (tramp-cleanup-all-connections))))

;; A host with Python but no worker: `M-x forj' offers to build it
;; there, and the build runs over TRAMP into the remote user's data
;; directory (a fresh one), from this checkout's sources.

(defmacro forj-remote-test-with-bare-host (answer &rest body)
  "Run BODY after `forj' on a remote project whose host has no worker.
The offer to build it is answered ANSWER (t or nil); `offers' holds the
questions asked, `chat' the chat buffer, `data' the remote data
directory, `root' and `remote' the project as in
`forj-remote-test-with-chat'.  The model reads notes.txt, then answers."
  (declare (indent 1) (debug t))
  `(let ((reason (forj-remote-test--skip-reason)))
     (when reason (ert-skip reason))
     (clrhash forj-remote--checked)
     (let* ((sshd (forj-remote-test--sshd))
            (tramp-persistency-file-name nil)
            (tramp-verbose 1)
            (tramp-use-ssh-controlmaster-options t)
            (tramp-ssh-controlmaster-options (format "-F %s" (plist-get sshd :config)))
            (forj-remote-python nil)
            (forj-tools-unsaved-buffers 'deny)
            ;; Read with `default-value', as a name on the remote host.
            (data (file-name-as-directory (make-temp-file "forj-remote-data-" t)))
            (forj-install-directory data)
            ;; The host's own python3; no optional parts: a shorter build.
            (forj-install-base-python "python3")
            (forj-install-extras nil)
            (pip-config (expand-file-name "pip/pip.conf" (or (getenv "XDG_CONFIG_HOME") "~/.config")))
            (remote-pip-config (expand-file-name "config/pip/pip.conf" (plist-get sshd :remote-home)))
            (offers nil))
       ;; The remote user's config directory is the test's: pip there finds
       ;; the index and cache this machine's pip is set up with, as `make
       ;; install' does.
       (when (file-exists-p pip-config)
         (make-directory (file-name-directory remote-pip-config) t)
         (copy-file pip-config remote-pip-config t))
       (when (get-buffer forj-install-buffer) (kill-buffer forj-install-buffer))
       (unwind-protect
           (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
             (make-directory (expand-file-name ".git" root))
             (let* ((remote (format "/ssh:%s@127.0.0.1#%d:%s" (user-login-name)
                                    (plist-get sshd :port) root))
                    (script (forj-chat-test--script
                             (list (list :text (concat "Reading.\n\n"
                                                       (forj-chat-test--block
                                                        "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"notes.txt\"}}")))
                                   (list :text "The note says milk."))))
                    (forj-providers (cons (list "test-script" :family 'scripted :script script)
                                          forj-providers))
                    (forj-provider "test-script")
                    (forj-provider-scripted-delay 0.001)
                    (chat nil))
               (unwind-protect
                   (progn
                     (should-not (forj-install-python remote))
                     ;; As at a terminal: the offer is a question, answered.
                     (cl-letf (((symbol-value 'noninteractive) nil)
                               ((symbol-function 'y-or-n-p)
                                (lambda (prompt) (push prompt offers) ,answer)))
                       (setq chat (forj remote)))
                     (should (equal (length offers) 1))
                     (should (string-match-p (regexp-quote (concat (file-remote-p remote) data))
                                             (car offers)))
                     ;; The worker starts, or the chat says why it could not.
                     (forj-test--wait-for
                      (lambda () (or (let ((worker (forj-worker-get remote)))
                                       (and worker (forj-worker-hello worker)))
                                     (forj-remote-test--start-failure chat)))
                      900)
                     ,@body)
                 (when (buffer-live-p chat)
                   (with-current-buffer chat (set-buffer-modified-p nil))
                   (kill-buffer chat))
                 (forj-worker-stop remote)
                 (delete-file script)
                 (tramp-cleanup-all-connections))))
         (clrhash forj-remote--checked)
         (ignore-errors (delete-file remote-pip-config))
         (delete-directory data t)))))

(defun forj-remote-test--start-failure (chat)
  "The notice in CHAT saying its worker could not start, or nil."
  (with-current-buffer chat
    (save-excursion
      (goto-char (point-min))
      (and (re-search-forward "could not start.*" nil t)
           (match-string-no-properties 0)))))

(ert-deftest forj-test-remote-host-without-a-worker-gets-it-built-on-first-use-then-chats ()
  "On a host with no worker, `forj' offers the build; yes builds it there over TRAMP and the chat reads through it."
  (forj-remote-test-with-bare-host t
    (should-not (forj-remote-test--start-failure chat))
    (should-not (forj-install-running-p remote))
    (let* ((python (expand-file-name "venv/bin/python" data))
           (worker (forj-worker-get remote)))
      (should (forj-worker-hello worker))
      (should (equal (forj-install-python remote) python))
      (should (file-executable-p python))
      (should (equal (plist-get (forj-worker-hello worker) :version) forj-version))
      (should (equal (plist-get (forj-worker-hello worker) :remote-root)
                     (directory-file-name root)))
      ;; The worker is the built one, run through ssh.
      (let ((pid (forj-remote-test--worker-pid root)))
        (should pid)
        (should (equal (car (forj-remote-test--cmdline pid)) python))
        (should (cl-some #'forj-remote-test--sshd-session-p
                         (forj-remote-test--ancestors pid)))))
    (with-current-buffer chat
      (forj-chat-test--say "What does the note say?")
      (should (forj-remote-test--approve-until-idle 120))
      (should (string-match-p "remember the milk" (buffer-string)))
      (should (string-match-p "The note says milk." (forj-session-transcript))))))

(ert-deftest forj-test-remote-host-without-a-worker-declined-builds-nothing-and-says-how ()
  "Declining the offer builds nothing on the host; the chat says what would install the worker."
  (forj-remote-test-with-bare-host nil
    (should (string-match-p "cannot import the worker (forj_py); M-x forj-install-worker installs it there"
                            (forj-remote-test--start-failure chat)))
    (should-not (forj-install-running-p remote))
    (should-not (forj-install-python remote))
    (should-not (file-exists-p (expand-file-name "venv.new" data)))))

(defconst forj-remote-test--long-batch
  (concat "Three steps.\n\n"
          (forj-chat-test--block
           "{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"first.txt\", \"content\": \"one\\n\"}}")
          (forj-chat-test--block
           "{\"id\": \"sh\", \"name\": \"run_shell\", \"args\": {\"cmd\": \"sleep 60\"}}")
          (forj-chat-test--block
           "{\"id\": \"w2\", \"name\": \"write_file\", \"args\": {\"path\": \"second.txt\", \"content\": \"two\\n\"}}"))
  "A reply whose second call runs long.")

(ert-deftest forj-test-remote-dropped-connection-is-a-dead-worker-and-the-remote-journal-offers-the-rest ()
  "The sshd serving the worker is killed mid-batch: the batch fails, the next worker offers it."
  (forj-remote-test-with-chat nil
      (list (list :text forj-remote-test--long-batch)
            (list :text "Understood, second.txt was not written."))
    (forj-chat-test--say "Do the three steps.")
    (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 60))
    (with-current-buffer "*forj-review*"
      (forj-review-approve-all)
      (forj-review-commit))
    (should (forj-test--wait-for
             (lambda () (and (forj-session-batch forj-session)
                             (eq (aref (forj-tools-batch-states (forj-session-batch forj-session)) 1)
                                 'running)))
             60))
    (let* ((pid (forj-remote-test--worker-pid root))
           (session (cl-find-if #'forj-remote-test--sshd-session-p
                                (forj-remote-test--ancestors pid)))
           (first-worker (forj-worker-get remote)))
      (should session)
      (signal-process session 'SIGKILL)
      ;; The remote worker sees its stdin end and stops.
      (should (forj-test--wait-for (lambda () (null (process-attributes pid))) 30))
      ;; A new worker (a new connection) says hello and the chat shows the batch.
      (should (forj-test--wait-for (lambda () forj-recover-pending) 90))
      (should-not (eq (forj-worker-get remote) first-worker)))
    (let ((text (buffer-string)))
      (should (string-match-p "left unfinished" text))
      (should (string-match-p "completed: ✓ write_file first.txt" text))
      (should (string-match-p "never ran: → write_file second.txt" text)))
    (forj-recover 'discard)
    (should (forj-chat-test--wait-idle 60))
    (should-not (file-exists-p (expand-file-name "second.txt" root)))
    (should (string-match-p "second.txt was not written" (forj-session-transcript)))
    ;; The journal is the remote host's, under the remote user's state directory.
    (should (file-exists-p (expand-file-name "state/forj/journal.sqlite3"
                                             (plist-get forj-remote-test--sshd :remote-home))))))

(ert-deftest forj-test-remote-attack-worker-paths-never-name-a-local-file ()
  "A remote worker's reply naming a local file (absolute, .., ~, a TRAMP name) touches nothing here.
The host in ROOT is never reached: every path is refused before TRAMP
would be asked."
  (let* ((root "/ssh:forj-no-such-host.invalid:/src/app/")
         (dir (make-temp-file "forj-local-" t))
         (victim (expand-file-name "passwd" dir))
         (other (expand-file-name "shadow" dir))
         (buffer nil))
    (unwind-protect
        (progn
          (with-temp-file victim (insert "root:x:0:0\n"))
          (setq buffer (find-file-noselect victim))
          (with-temp-file victim (insert "changed on disk\n"))
          (dolist (path (list victim (concat "../../.." victim) (concat "/sudo::" victim)
                              (concat "/ssh:other:" victim) "~/x" ""))
            (let ((mapped (forj-project-file path root)))
              (should (or (null mapped) (string-prefix-p "/ssh:forj-no-such-host.invalid:/src/app/" mapped)))))
          (should (equal (forj-project-file "a/b.txt" root)
                         "/ssh:forj-no-such-host.invalid:/src/app/a/b.txt"))
          ;; Reverting after an edit, a move, a delete, a patch: the local
          ;; buffer of that name keeps its text and its file name.
          (forj-files-revert root (list victim))
          (forj-moves--note root (list :src victim :dst other :is_dir :false) "fs_move")
          (forj-moves--note root (list :path victim :deleted t) "fs_delete")
          (forj-moves--note root (list :path victim) "file_patch")
          (forj-moves--note root (list :applied t :files (vector (list :path other :from victim
                                                                     :action "moved")))
                            "apply_patch")
          (with-current-buffer buffer
            (should (equal buffer-file-name victim))
            (should (equal (buffer-string) "root:x:0:0\n"))
            (should-not forj-moves-deleted)
            (should-not header-line-format))
          ;; A path in a tool's output is no link to the local file.
          (should-not (forj-tools--existing-file victim root (make-hash-table :test #'equal)))
          (should-not (forj-render--file victim root)))
      (when (buffer-live-p buffer)
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer))
      (delete-directory dir t))))

(ert-deftest forj-test-remote-login-shell-chatter-before-the-worker-is-no-frame ()
  "A remote ~/.bashrc that prints (even a frame-shaped line) before the worker starts breaks nothing."
  (let* ((dir (make-temp-file "forj-chatter-" t))
         (state (make-temp-file "forj-chatter-state-" t))
         (token "0123456789abcdef0123456789abcdef")
         (process (make-process
                   :name "forj-chatter"
                   :command (list "sh" "-c"
                                  "echo 'Welcome to the host'; printf '000010(return 1 nil)'; exec \"$@\""
                                  "login-shell"
                                  (or (getenv "FORJ_PYTHON") "python3") "-m" "forj_py" "--stdio"
                                  "--root" dir "--state-dir" state)
                   :connection-type 'pipe :coding 'binary :noquery t
                   :stderr (get-buffer-create " *forj-chatter-stderr*")))
         (hello nil) (failure nil))
    (unwind-protect
        (let ((conn (forj-epc-attach process :name "chatter"
                                     :preamble forj-epc-stdio-preamble)))
          (process-send-string process (concat token "\n"))
          (forj-epc-call conn "hello" (list :token token)
                         :success (lambda (reply) (setq hello reply))
                         :error (lambda (e) (setq failure e)))
          (with-timeout (60 (ert-fail "no hello in 60 s"))
            (while (not (or hello failure))
              (accept-process-output process 0.1)))
          (should-not failure)
          (should (equal (plist-get hello :root) (directory-file-name (file-truename dir))))
          (should (equal (forj-epc-connection-noise conn) "Welcome to the host\n000010(return 1 nil)")))
      (when (process-live-p process)
        (process-send-eof process)
        (with-timeout (10 (delete-process process))
          (while (process-live-p process) (accept-process-output process 0.1))))
      (delete-directory dir t)
      (delete-directory state t))))

(ert-deftest forj-test-remote-endless-login-shell-chatter-ends-the-connection-saying-why ()
  "A remote shell that prints without end, and starts no worker, is no wait without end."
  (let* ((process (make-process :name "forj-chatter" :command (list "sh" "-c" "yes Welcome")
                                :connection-type 'pipe :coding 'binary :noquery t))
         (reason nil))
    (unwind-protect
        (progn
          (forj-epc-attach process :name "chatter" :preamble forj-epc-stdio-preamble
                           :on-close (lambda (_conn why) (setq reason why)))
          (with-timeout (30 (ert-fail "the connection did not give up"))
            (while (not reason) (accept-process-output process 0.1)))
          (should (string-match-p "~/\\.bashrc" reason)))
      (delete-process process))))

(ert-deftest forj-test-remote-attack-chat-file-naming-a-host-connects-to-nothing ()
  "Opening a chat file whose first line names /ssh:host: or /sudo:: makes TRAMP connect nowhere."
  (let* ((dir (make-temp-file "forj-chat-file-" t))
         (connections 0)
         (count (lambda (&rest _) (cl-incf connections))))
    (advice-add 'tramp-maybe-open-connection :before count)
    (unwind-protect
        (dolist (case '(("/ssh:forj-no-such-host.invalid:/src/app/" . t)
                        ("/ssh:forj-no-such-host.invalid:~/app/" . nil)
                        ("/sudo::/root/" . t)))
          (let* ((file (expand-file-name "chat.md" dir))
                 (buffer (progn (with-temp-file file
                                  (insert (format "<!-- forj-chat root: %s -->\n\n## User\n\nhi\n"
                                                  (car case))))
                                (find-file-noselect file))))
            (unwind-protect
                (with-current-buffer buffer
                  (should (eq major-mode 'forj-chat-mode))
                  (if (cdr case)
                      (should (equal (forj-session-root forj-session) (car case)))
                    (should-not (forj-session-root forj-session)))
                  ;; Named, not chosen: the user confirms it before any worker starts.
                  (should-not (forj-session-root-confirmed forj-session))
                  (should (= connections 0)))
              (with-current-buffer buffer (set-buffer-modified-p nil))
              (kill-buffer buffer))))
      (advice-remove 'tramp-maybe-open-connection count)
      (delete-directory dir t))))

(provide 'forj-remote-test)
;;; forj-remote-test.el ends here
