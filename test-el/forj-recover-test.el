;;; forj-recover-test.el --- Unfinished batches after a killed worker  -*- lexical-binding: t; -*-

;;; Commentary:

;; The chat runs a batch whose command is still running when the
;; worker is killed (kill -9).  A new worker's hello lists the batch;
;; the chat shows which calls completed, which was interrupted and
;; which never ran, runs nothing by itself, and resumes or discards on
;; the user's word, then tells the model (FR-RES-04, FR-RES-05).

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-recover)
(require 'forj-epc-test)
(require 'forj-chat-test)
(require 'forj-history-test)
(require 'forj-flow-test)

(defconst forj-recover-test--calls
  (concat "Three steps.\n\n"
          (forj-chat-test--block
           "{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"first.txt\", \"content\": \"one\\n\"}}")
          (forj-chat-test--block
           "{\"id\": \"sh\", \"name\": \"run_shell\", \"args\": {\"cmd\": \"sleep 60\"}}")
          (forj-chat-test--block
           "{\"id\": \"w2\", \"name\": \"write_file\", \"args\": {\"path\": \"second.txt\", \"content\": \"two\\n\"}}"))
  "A reply whose second call runs long.")

(defun forj-recover-test--approve ()
  "Wait for the review, approve everything in it, and commit."
  (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
  (with-current-buffer "*forj-review*"
    (forj-review-approve-all)
    (forj-review-commit)))

(defun forj-recover-test--kill-mid-batch (root)
  "Send the message, approve, and kill ROOT's worker while `sleep' runs."
  (forj-chat-test--say "Do the three steps.")
  (forj-recover-test--approve)
  ;; The command is running: the first call's file is there, the batch says so.
  (should (forj-test--wait-for
           (lambda () (and (forj-session-batch forj-session)
                           (eq (aref (forj-tools-batch-states (forj-session-batch forj-session)) 1) 'running)))
           30))
  (should (file-exists-p (expand-file-name "first.txt" root)))
  (signal-process (process-id (forj-worker-process (forj-worker-get root))) 'SIGKILL)
  ;; A new worker says hello and the chat shows the batch.
  (should (forj-test--wait-for (lambda () forj-recover-pending) 60))
  (should (eq (forj-session-state forj-session) 'tools)))

(defun forj-recover-test--last-results ()
  "The results of the record's last tool entry, decoded."
  (let ((entry (cl-find "tool" (reverse (forj-session-record forj-session)) :key (lambda (e) (plist-get e :role))
                        :test #'equal)))
    (with-temp-buffer
      (insert (plist-get entry :text))
      (mapcar #'forj-tools-json-decode (forj-session-blocks (point-min) (point-max) "tool-result")))))

(ert-deftest forj-test-recover-fr-res-05-killed-worker-resume ()
  "FR-RES-05: after kill -9 mid-batch the chat lists each call's fate; resume reviews again."
  (forj-chat-test-with-session nil
      (list (list :text forj-recover-test--calls)
            (list :text "All three are done now."))
    (forj-recover-test--kill-mid-batch root)
    (let ((text (buffer-string)))
      (should (string-match-p "left unfinished" text))
      (should (string-match-p "completed: ✓ write_file first.txt" text))
      (should (string-match-p "interrupted (it may have done part of its work): → run_shell sleep 60" text))
      (should (string-match-p "never ran: → write_file second.txt" text)))
    ;; Nothing ran by itself.
    (should-not (file-exists-p (expand-file-name "second.txt" root)))
    (forj-recover 'resume)
    ;; The call that never ran is reviewed again before it runs.
    (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
    (with-current-buffer "*forj-review*"
      (should (string-match-p "second.txt" (buffer-string)))
      (forj-review-approve-all)
      (forj-review-commit))
    (should (forj-chat-test--wait-idle 60))
    (should (equal (with-temp-buffer (insert-file-contents (expand-file-name "second.txt" root))
                                     (buffer-string))
                   "two\n"))
    (let ((results (forj-recover-test--last-results)))
      (should (equal (mapcar (lambda (r) (plist-get r :id)) results) '("w1" "sh" "w2")))
      (should (eq (plist-get (nth 0 results) :ok) t))
      (should (equal (plist-get (plist-get (nth 1 results) :error) :type) "cancelled"))
      (should (eq (plist-get (plist-get (plist-get (nth 1 results) :error) :details) :interrupted) t))
      (should (eq (plist-get (nth 2 results) :ok) t)))
    ;; The model was told and answered.
    (should (string-match-p "All three are done now." (forj-session-transcript)))
    ;; The batch is resolved: a new worker lists nothing.
    (forj-worker-restart root)
    (let ((worker (forj-test--worker root)))
      (should (null (append (plist-get (forj-worker-hello worker) :unfinished) nil))))))

(ert-deftest forj-test-recover-fr-res-05-killed-worker-discard ()
  "FR-RES-05: discarding answers the calls that never ran as cancelled; nothing runs."
  (forj-chat-test-with-session nil
      (list (list :text forj-recover-test--calls)
            (list :text "Understood, I will not write second.txt."))
    (forj-recover-test--kill-mid-batch root)
    (forj-recover 'discard)
    (should (forj-chat-test--wait-idle 60))
    (should-not (get-buffer "*forj-review*"))
    (should-not (file-exists-p (expand-file-name "second.txt" root)))
    (let ((results (forj-recover-test--last-results)))
      (should (equal (mapcar (lambda (r) (plist-get r :id)) results) '("w1" "sh" "w2")))
      (should (eq (plist-get (plist-get (plist-get (nth 2 results) :error) :details) :discarded) t)))
    (should (string-match-p "I will not write second.txt" (forj-session-transcript)))))

(ert-deftest forj-test-recover-fr-res-05-killed-emacs ()
  "FR-RES-05: Emacs killed mid-batch; the chat reopened in another Emacs shows the batch and discards it."
  (forj-test-with-project nil
    (make-directory (expand-file-name ".git" root))
    (let ((script (forj-chat-test--script (list (list :text forj-recover-test--calls)
                                                (list :text "Nothing more will run."))))
          (pidfile (make-temp-file "forj-worker-pid-")))
      (unwind-protect
          (progn
            ;; First Emacs: the command runs when Emacs dies.
            (should (equal (forj-history-test--emacs
                            root
                            `((setq forj-providers (cons (list "test-script" :family 'scripted :script ,script)
                                                         forj-providers)
                                    forj-provider "test-script"
                                    forj-provider-scripted-delay 0.001)
                              (with-current-buffer (forj root)
                                (goto-char (point-max))
                                (insert "Do the three steps.")
                                (forj-chat-send)
                                (let ((deadline (+ (float-time) 60)))
                                  (while (and (not (get-buffer "*forj-review*")) (< (float-time) deadline))
                                    (accept-process-output nil 0.05)))
                                (with-current-buffer "*forj-review*"
                                  (forj-review-approve-all)
                                  (forj-review-commit))
                                (let ((deadline (+ (float-time) 60)))
                                  (while (and (not (and (forj-session-batch forj-session)
                                                        (eq (aref (forj-tools-batch-states (forj-session-batch forj-session)) 1)
                                                            'running)))
                                              (< (float-time) deadline))
                                    (accept-process-output nil 0.05)))
                                (with-temp-file ,pidfile
                                  (insert (number-to-string
                                           (process-id (forj-worker-process (forj-worker-get root))))))
                                (signal-process (emacs-pid) 'SIGKILL))))
                           "Killed"))
            ;; Its worker follows its parent.
            (let ((pid (string-to-number (with-temp-buffer (insert-file-contents pidfile) (buffer-string)))))
              (should (> pid 0))
              (should (forj-test--wait-for (lambda () (null (process-attributes pid))) 30)))
            (should (file-exists-p (expand-file-name "first.txt" root)))
            ;; Second Emacs (this one): the saved chat reopens and shows the batch.
            (let* ((forj-providers (cons (list "test-script" :family 'scripted :script script) forj-providers))
                   (forj-provider "test-script")
                   (forj-provider-scripted-delay 0.001)
                   (chat (forj-history-open (plist-get (car (forj-history-chats root)) :file))))
              (unwind-protect
                  (with-current-buffer chat
                    (should (forj-test--wait-for (lambda () forj-recover-pending) 30))
                    (let ((text (buffer-string)))
                      (should (string-match-p "completed: ✓ write_file first.txt" text))
                      (should (string-match-p "never ran: → write_file second.txt" text)))
                    (forj-recover 'discard)
                    (should (forj-chat-test--wait-idle 60))
                    (should (string-match-p "Nothing more will run." (forj-session-transcript)))
                    (should-not (file-exists-p (expand-file-name "second.txt" root))))
                (with-current-buffer chat (set-buffer-modified-p nil))
                (kill-buffer chat))))
        (delete-file script)
        (delete-file pidfile)))))

(ert-deftest forj-test-recover-resumed-calls-are-all-reviewed ()
  "Resumed calls all open in the review; one that would run without asking does not run if denied."
  (forj-test-with-project '(("a.txt" . "alpha\n"))
    (let* ((forj-tools-review-all t)
           (run (forj-flow-test--run root "```tool-call
{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}
```
```tool-call
{\"id\": \"w\", \"name\": \"write_file\", \"args\": {\"path\": \"new.txt\", \"content\": \"new\\n\"}}
```
")))
      (with-current-buffer (forj-flow-test--review-buffer)
        (should (string-match-p "Read a.txt.*recovered call: runs only if you approve it again" (buffer-string)))
        (should (string-match-p "new.txt" (buffer-string)))
        (forj-review-decide "r" (cons 'deny "not now"))
        (forj-review-decide "w" t)
        (forj-review-commit))
      (should (forj-test--wait-for (cdr run) 30))
      (let ((results (funcall (cdr run))))
        (should (equal (plist-get (plist-get (nth 0 results) :error) :message)
                       "The user denied this call: not now"))
        (should (eq (plist-get (nth 1 results) :ok) t)))
      (kill-buffer (car run))
      (should (file-exists-p (expand-file-name "new.txt" root)))
      ;; Nothing of the first plan is left for recovery.
      (forj-worker-restart root)
      (should (null (append (plist-get (forj-worker-hello (forj-test--worker root)) :unfinished) nil))))))

(provide 'forj-recover-test)
;;; forj-recover-test.el ends here
