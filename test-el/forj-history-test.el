;;; forj-history-test.el --- Saved chats survive Emacs  -*- lexical-binding: t; -*-

;;; Commentary:

;; A chat is saved as it goes.  One batch Emacs talks to a local
;; provider server (fake_provider.py) and then dies by SIGKILL; a second
;; batch Emacs lists the project's saved chats, reopens the chat with
;; its history and continues it: the model's next request holds the
;; whole conversation.  The state directory is a temporary one.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-history)
(require 'forj-epc-test)
(require 'forj-chat-test)
(require 'forj-provider-test)

(defconst forj-history-test--elisp
  (expand-file-name "../elisp" (file-name-directory (or load-file-name buffer-file-name)))
  "The directory of forj's Lisp.")

(defun forj-history-test--emacs (root body)
  "Run BODY (forms) in a new batch Emacs on project ROOT; return its exit code.
Its output goes to the buffer *forj-history-child*."
  (let ((script (make-temp-file "forj-child-" nil ".el")))
    (unwind-protect
        (progn
          (with-temp-file script
            (let ((print-length nil) (print-level nil))
              (prin1 `(progn
                        (require 'forj-chat)
                        (setq forj-worker-python ,forj-test--python
                              forj-providers
                              (cons (list "fake" :family 'openai :model "fake-model"
                                          :url ,(format "http://127.0.0.1:%d/openai-text/v1"
                                                        (forj-provider-test--server))
                                          :key-env '("FORJ_TEST_PROVIDER_KEY"))
                                    forj-providers)
                              forj-provider "fake")
                        (defun forj-history-test--idle ()
                          (let ((deadline (+ (float-time) 60)))
                            (while (and (not (eq (forj-session-state forj-session) 'idle)) (< (float-time) deadline))
                              (accept-process-output nil 0.05)))
                          (unless (eq (forj-session-state forj-session) 'idle) (kill-emacs 3)))
                        (let ((root ,root)) ,@body))
                     (current-buffer))))
          (let ((process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test-history" process-environment)))
            (with-current-buffer (get-buffer-create "*forj-history-child*") (erase-buffer))
            (call-process (expand-file-name invocation-name invocation-directory) nil
                          "*forj-history-child*" nil
                          "-Q" "--batch" "-L" forj-history-test--elisp "-l" script)))
      (delete-file script))))

(ert-deftest forj-test-history-saved-chat-survives-a-killed-emacs ()
  "A chat saved as it goes is resumed in a new Emacs and continued with its history."
  (forj-test-with-project '(("README.md" . "# demo\n"))
    (make-directory (expand-file-name ".git" root))
    (let ((out (make-temp-file "forj-history-out-")))
      (unwind-protect
          (progn
            ;; First Emacs: one exchange, then it dies without saving anything more.
            (should (equal (forj-history-test--emacs
                            root
                            '((with-current-buffer (forj root)
                                (goto-char (point-max))
                                (insert "Remember the word pineapple.")
                                (forj-chat-send)
                                (forj-history-test--idle)
                                (signal-process (emacs-pid) 'SIGKILL))))
                           ;; Killed by SIGKILL.
                           "Killed"))
            (let ((chats (forj-history-chats root)))
              (should (= (length chats) 1))
              (should (equal (plist-get (car chats) :title) "Remember the word pineapple.")))
            ;; Second Emacs: resume the chat and go on.
            (should (equal (forj-history-test--emacs
                            root
                            `((let ((chats (forj-history-chats root)))
                                (with-current-buffer (forj-history-open (plist-get (car chats) :file))
                                  (let ((text (forj-session-transcript))) (with-temp-file ,out (insert text)))
                                  (goto-char (point-max))
                                  (insert "What was the word?")
                                  (forj-chat-send)
                                  (forj-history-test--idle)
                                  (kill-emacs 0)))))
                           0))
            (let ((resumed (with-temp-buffer (insert-file-contents out) (buffer-string))))
              (should (string-match-p "## User\n\nRemember the word pineapple.\n\n## Assistant\n\nHello, world" resumed)))
            ;; The request after the resume carried the whole conversation.
            (let ((request (json-encode (plist-get (forj-provider-test--last-request) :body))))
              (should (string-match-p "pineapple" request))
              (should (string-match-p "Hello, world" request))
              (should (string-match-p "What was the word" request)))
            ;; The saved copy holds both turns, with their ids, and the messages.
            (let* ((chat (car (forj-history-chats root)))
                   (users (cl-remove-if-not (lambda (e) (equal (plist-get e :role) "user"))
                                            (plist-get chat :record))))
              (should (= (length users) 2))
              (should (cl-every (lambda (e) (stringp (plist-get e :turn))) users))
              (should (equal (mapcar (lambda (m) (plist-get m :role)) (plist-get chat :messages))
                             '("user" "assistant" "user" "assistant")))
              (should (file-exists-p (concat (file-name-sans-extension (plist-get chat :file)) ".md")))))
        (delete-file out)))))

(ert-deftest forj-test-history-resume-lists-and-reopens ()
  "`forj-resume' lists the project's chats and reopens the chosen one, record and turn ids."
  (forj-chat-test-with-session nil (list (list :text "First answer."))
    (forj-chat-test--say "First question")
    (should (forj-chat-test--wait-idle))
    (let ((record (copy-tree (forj-session-record forj-session)))
          (id (forj-session-id forj-session)))
      (set-buffer-modified-p nil)
      (kill-buffer chat)
      (let ((reopened (cl-letf (((symbol-function 'completing-read)
                                 (lambda (_prompt collection &rest _)
                                   (let ((all (all-completions "" collection)))
                                     (should (= (length all) 1))
                                     (should (string-match-p "First question" (car all)))
                                     (car all)))))
                        (let ((default-directory root)) (forj-resume))
                        (current-buffer))))
        (unwind-protect
            (with-current-buffer reopened
              (should (equal (forj-session-id forj-session) id))
              (should (equal (mapcar (lambda (e) (list (plist-get e :role) (plist-get e :text) (plist-get e :turn)))
                                     (forj-session-record forj-session))
                             (mapcar (lambda (e) (list (plist-get e :role) (plist-get e :text) (plist-get e :turn)))
                                     record)))
              (should (string-match-p "First answer." (buffer-string))))
          (kill-buffer reopened))))))

(provide 'forj-history-test)
;;; forj-history-test.el ends here
