;;; forj-remote.el --- The forj worker on the host of a remote project  -*- lexical-binding: t; -*-

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

;; `M-x forj' in a TRAMP directory (/ssh:host:/src/app/) runs the
;; worker where the code is: TRAMP starts `python -m forj_py --stdio
;; --root /src/app' on that host, and Emacs speaks EPC over the
;; process's own pipe, so no port is opened on either machine.  Every
;; tool (reads, edits, commands in the sandbox, git, search, the
;; journal, backups, undo) then runs on that host, while the model is
;; called, and the review, diffs and undo are shown, in this Emacs, on
;; TRAMP buffers: the hello's root is given back as a TRAMP directory,
;; so every path under it names the remote file.
;;
;; The worker is started with TRAMP's direct asynchronous process (ssh
;; with plain pipes, no terminal): the frames are binary data, which a
;; terminal would change.  Methods whose hosts ssh reaches the same way
;; (sshx, scpx) start it with ssh.  The process environment is Emacs's
;; own without the variables named like secrets, and TRAMP sends the
;; remote host none of it: provider keys stay in this Emacs.
;;
;; The remote needs Python 3.10 or later with the worker installed:
;; on a host without it, `M-x forj' offers to build it there with
;; `forj-install-worker' (`forj-remote-worker-available-p' tells);
;; `forj-remote-check' says what is missing.  Without bubblewrap there, every command is
;; reviewed, as locally.  A dropped connection is a dead worker: the
;; calls under way fail as for a worker that died, and the journal on
;; the remote host lets the next worker offer what was left unfinished.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'tramp)
(require 'forj)
(require 'forj-install)
(require 'forj-epc)
(require 'forj-worker)


(defcustom forj-remote-python nil
  "The Python that runs the worker on a remote host, as a path on that host.
nil means the worker `forj-install-worker' installed on that host, else
\"python3\" found on the remote PATH (which must then import forj_py).
A file name without its TRAMP prefix, e.g. \"/opt/forj/venv/bin/python\"."
  :type '(choice (const :tag "Installed worker, else python3" nil)
                 (string :tag "Python on the remote host"))
  :group 'forj)

(defcustom forj-remote-worker-arguments nil
  "Extra command-line arguments for a remote worker.
For example (\"--log-level\" \"INFO\").  File names in them are names
on the remote host."
  :type '(repeat string)
  :group 'forj)

(put 'forj-remote-python 'risky-local-variable t)
(put 'forj-remote-worker-arguments 'risky-local-variable t)

(defconst forj-remote--ssh-alike '(("sshx" . "ssh") ("scpx" . "scp"))
  "Methods without direct processes whose hosts ssh reaches, and the method used.")

(defconst forj-remote--check-script
  "import importlib.util as u, json, shutil, sys
forj = None
if sys.version_info >= (3, 10) and u.find_spec('forj_py'):
    import forj_py
    forj = forj_py.__version__
venv = bool(u.find_spec('venv') and u.find_spec('ensurepip'))
print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'forj': forj,
                  'venv': venv, 'bwrap': shutil.which('bwrap')}))"
  "What `forj-remote-check' runs with the remote Python: one line of JSON.")

(defvar forj-remote--checked (make-hash-table :test #'equal)
  "(HOST-PREFIX . PYTHON) -> the check that passed, for the session.")

;;; Names

(defun forj-remote-host (directory)
  "The TRAMP prefix of DIRECTORY, e.g. \"/ssh:user@host:\"."
  (file-remote-p directory))

(defun forj-remote--process-directory (root)
  "ROOT as a directory TRAMP can start a direct process in.
Signal a `user-error' when its method cannot carry a binary pipe."
  (let* ((vec (tramp-dissect-file-name root))
         (method (tramp-file-name-method vec))
         (alike (cdr (assoc method forj-remote--ssh-alike))))
    (when alike
      (setq vec (copy-tramp-file-name vec))
      (setf (tramp-file-name-method vec) alike))
    (unless (tramp-get-method-parameter vec 'tramp-direct-async)
      (user-error "forj: The TRAMP method %s cannot run the worker (it needs a process with plain pipes); use /ssh: or /scp:"
                  method))
    (when (and (tramp-multi-hop-p vec)
               (> (length (tramp-compute-multi-hops vec)) 1))
      (user-error "forj: A multi-hop TRAMP name cannot run the worker; set up the hop in your ssh config (ProxyJump) and use /ssh:"))
    (tramp-make-tramp-file-name vec (tramp-file-name-localname vec))))

(defun forj-remote-hello (root hello)
  "HELLO, the worker's reply, with its root as Emacs names it under ROOT.
The worker reports its root as a path on its own host; the root Emacs
uses is the same directory with ROOT's TRAMP prefix, so the files the
worker names are the remote files, wherever Emacs visits, reverts or
diffs them.  The worker's own path is kept as :remote-root."
  (let ((remote (plist-get hello :root))
        (copy (copy-sequence hello)))
    (if (not (stringp remote))
        copy
      (plist-put (plist-put copy :remote-root remote)
                 :root (concat (forj-remote-host root) remote)))))

;;; Checking the host

(defun forj-remote-python-for (root)
  "Return the Python on ROOT's host to run the worker with, a path there."
  (or forj-remote-python
      (forj-install-python root)
      "python3"))

(defun forj-remote-worker-available-p (root)
  "Whether ROOT's host has a worker to run, without building one.
The worker is there when `forj-remote-python' names it, when
`forj-install-worker' built it on that host, or when the host's
python3 imports it.  The local `forj-worker-python' and a local
checkout's .venv are this machine's, and count for nothing there."
  (and (or forj-remote-python
           (forj-install-python root)
           (gethash (cons (forj-remote-host root) "python3") forj-remote--checked)
           (plist-get (forj-remote-check root "python3") :forj))
       t))

(defun forj-remote-check (root &optional python)
  "What ROOT's host has for the worker, asked of PYTHON there.
A plist: :python its version (nil when there is none), :forj the
worker's version (nil when PYTHON cannot import it), :venv whether
Python can make virtual environments, :bwrap the sandbox's path or
nil, and :problems, sentences saying what is missing."
  (let* ((python (or python (forj-remote-python-for root)))
         (default-directory root)
         (host (forj-remote-host root))
         (out (with-temp-buffer
                (list (condition-case err
                          (process-file python nil t nil "-c" forj-remote--check-script)
                        (error (error-message-string err)))
                      (buffer-string))))
         (info (and (eq (car out) 0)
                    (ignore-errors
                      (json-parse-string (car (last (split-string (cadr out) "\n" t)))
                                         :object-type 'plist :null-object nil
                                         :false-object nil))))
         (problems nil))
    (cond
     ((null info)
      (push (format "no Python at %s on %s: install python3 (3.10 or later) there, or set `forj-remote-python'"
                    python host)
            problems))
     ((version< (plist-get info :python) "3.10")
      (push (format "%s on %s is Python %s; the worker needs 3.10 or later"
                    python host (plist-get info :python))
            problems))
     ((null (plist-get info :forj))
      (push (format "%s on %s cannot import the worker (forj_py)%s"
                    python host
                    (if (plist-get info :venv)
                        "; M-x forj-install-worker installs it there"
                      "; install python3-venv there, then M-x forj-install-worker"))
            problems)))
    (when (and info (null (plist-get info :bwrap)))
      (push (format "no bubblewrap (bwrap) on %s: every command will be reviewed before it runs; install bubblewrap there to sandbox them"
                    host)
            problems))
    (append info (list :problems (nreverse problems)))))

(defun forj-remote--ensure-host (root log)
  "Check ROOT's host once per session; return the Python to run there.
Signal a `user-error' if the host cannot run the worker.  What is
missing goes to LOG as well."
  (let* ((python (forj-remote-python-for root))
         (key (cons (forj-remote-host root) python)))
    (unless (gethash key forj-remote--checked)
      (let* ((check (forj-remote-check root python))
             (problems (plist-get check :problems))
             (fatal (or (null (plist-get check :python)) (null (plist-get check :forj)))))
        (with-current-buffer log
          (let ((inhibit-read-only t))
            (goto-char (point-max))
            (dolist (problem problems)
              (insert (format ";; %s\n" problem)))))
        (when fatal
          ;; The build is offered before the worker starts
          ;; (`forj-worker-offer-install'); one declined is not started here.
          (user-error "forj: %s%s" (string-join problems "; ")
                      (if (forj-install-running-p root)
                          (format " (the worker is being built there now: see %s)"
                                  forj-install-buffer)
                        "")))
        (dolist (problem problems)
          (display-warning 'forj problem :warning))
        (puthash key check forj-remote--checked)))
    python))

;;; Starting and speaking

(defun forj-remote-make-process (root log)
  "Start the worker for the remote ROOT on its host, its stderr into LOG.
The command runs through TRAMP (`make-process' with :file-handler) as a
direct process: ssh with plain pipes.  Return the process; its pipe
carries the token, then EPC frames (`forj-worker-attach')."
  (let* ((python (forj-remote--ensure-host root log))
         (default-directory (forj-remote--process-directory root))
         (vec (tramp-dissect-file-name default-directory))
         ;; Emacs's environment as it started, without secrets: TRAMP sends
         ;; the remote host only what differs from it, which is nothing, and
         ;; the local ssh has no secret to forward (SendEnv) either.
         (process-environment
          (forj-worker-environment (default-toplevel-value 'process-environment)))
         (had (tramp-get-connection-property vec "direct-async-process" 'none)))
    (unwind-protect
        (progn
          ;; Only for this process: the user's other processes on that host
          ;; keep whatever TRAMP does for them.
          (tramp-set-connection-property vec "direct-async-process" t)
          (make-process
           :name (format "forj-worker %s" (abbreviate-file-name root))
           :command (append (list python "-m" "forj_py" "--stdio"
                                  "--root" (directory-file-name (file-local-name root)))
                            (forj-worker-settings-arguments)
                            forj-remote-worker-arguments)
           :connection-type 'pipe
           :coding 'binary
           :noquery t
           :stderr log
           :file-handler t))
      (if (eq had 'none)
          (tramp-flush-connection-property vec "direct-async-process")
        (tramp-set-connection-property vec "direct-async-process" had)))))

(provide 'forj-remote)
;;; forj-remote.el ends here
