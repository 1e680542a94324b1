;;; remote-bench.el --- Tool calls on a remote project over loopback ssh, beside local  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run on its own (it starts an sshd of its own, as the ERT suite does):
;;
;;   FORJ_PYTHON=$PWD/.venv/bin/python emacs -Q --batch -L elisp -L test-el \
;;     -l bench/remote-bench.el
;;
;; One temporary project, two workers: a local one (loopback TCP) and
;; one reached through TRAMP's /ssh: on 127.0.0.1 (ssh's pipes, the
;; --stdio worker).  Prints the median over 200 calls, after 20 warm-up
;; calls, of:
;;   ping                    a no-op round trip
;;   read_file               a 120-byte read_file (plan + execute)
;; and the time from starting each worker to its hello.  Loopback ssh
;; measures what ssh itself adds (encryption, its own buffering), not
;; a network's latency: add the link's round trip twice per tool call
;; (plan, then execute).

;;; Code:

(require 'forj-remote-test)

(defun forj-remote-bench--median (samples)
  "The median of SAMPLES, in milliseconds."
  (* 1000 (nth (/ (length samples) 2) (sort samples #'<))))

(defun forj-remote-bench--time (n warmup thunk)
  "Call THUNK WARMUP times, then N times; the median time in milliseconds."
  (dotimes (_ warmup) (funcall thunk))
  (let (samples)
    (dotimes (_ n)
      (let ((t0 (float-time)))
        (funcall thunk)
        (push (- (float-time) t0) samples)))
    (forj-remote-bench--median samples)))

(defun forj-remote-bench--ready (root)
  "Start ROOT's worker; return it and the seconds it took, (WORKER . SECONDS)."
  (let ((t0 (float-time)) worker failure)
    (forj-worker-ensure root (lambda (w) (setq worker w)) (lambda (e) (setq failure e)))
    (forj-test--wait-for (lambda () (or worker failure)) 60)
    (when failure (error "Worker for %s failed: %S" root failure))
    (cons worker (- (float-time) t0))))

(defun forj-remote-bench--measure (label root)
  "Print LABEL's figures for the worker of ROOT."
  (let* ((ready (forj-remote-bench--ready root))
         (conn (forj-worker-connection (car ready)))
         (call (list :calls (vector (list :id "r" :name "read_file" :args (list :path "small.txt"))))))
    (princ (format "%s start_to_hello_ms %.0f\n" label (* 1000 (cdr ready))))
    (princ (format "%s ping_ms %.3f\n" label
                   (forj-remote-bench--time 200 20 (lambda () (forj-epc-call-sync conn "ping" nil)))))
    (princ (format "%s read_file_ms %.3f\n" label
                   (forj-remote-bench--time
                    200 20
                    (lambda ()
                      (let ((plan (forj-epc-call-sync conn "plan" call)))
                        (forj-epc-call-sync conn "execute"
                                            (list :batch_id (plist-get plan :batch_id))))))))))

(let ((reason (forj-remote-test--skip-reason)))
  (when reason (error "Cannot run: %s" reason)))

(let* ((sshd (forj-remote-test--sshd))
       (tramp-persistency-file-name nil)
       (tramp-verbose 1)
       (tramp-use-ssh-controlmaster-options t)
       (tramp-ssh-controlmaster-options (format "-F %s" (plist-get sshd :config)))
       (forj-worker-python forj-test--python)
       (forj-remote-python forj-test--python)
       (root (file-name-as-directory (make-temp-file "forj-remote-bench-" t)))
       (remote (format "/ssh:%s@127.0.0.1#%d:%s" (user-login-name) (plist-get sshd :port) root))
       (process-environment (cons (concat "FORJ_STATE_DIR=" root ".state") process-environment)))
  (make-directory (expand-file-name ".git" root))
  (with-temp-file (expand-file-name "small.txt" root)
    (insert (make-string 119 ?x) "\n"))
  (unwind-protect
      (progn
        (forj-remote-bench--measure "local" root)
        (forj-remote-bench--measure "ssh" remote))
    (forj-worker-stop root)
    (forj-worker-stop remote)
    (forj-remote-test--stop-sshd)
    (delete-directory root t)))

;;; remote-bench.el ends here
